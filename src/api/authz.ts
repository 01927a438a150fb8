/**
 * Who may call which root field, checked per field: viewer < operator < admin.
 *
 * Every root field declares the role it needs in its Pothos `extensions`
 * (`extensions: requires('operator')`); {@link guardRootFields} wraps each
 * root resolver (and each subscription's `subscribe`) with the check after the
 * schema is built, and refuses to build when a field declares no role, so a new
 * field cannot ship open by omission. Because the check sits on the field, a
 * mutation document mixing an operator field with an admin field is judged
 * field by field: the operator's field runs, the admin's is FORBIDDEN.
 *
 * The same wrapper times each root field for the resolver-duration metric.
 */
import {
  defaultFieldResolver,
  GraphQLError,
  type GraphQLFieldResolver,
  type GraphQLResolveInfo,
  type GraphQLSchema,
} from 'graphql'
import * as audit from '../../sql/auditLog.ts'
import { isRole, type Role, roleAllows } from '../auth.ts'
import { AppError, ERROR_CODES } from '../errors.ts'
import type { Refusal, RefusalReason } from '../identity/authenticator.ts'
import type { Logger } from '../log.ts'
import { refusals } from '../refusalSampler.ts'
import type { ApiContext } from './context.ts'

/** The `extensions` key a root field's required role lives under. */
export const ROLE_EXTENSION = 'requiredRole'

/** Field `extensions` declaring the role a root field needs. */
export function requires(role: Role): { [ROLE_EXTENSION]: Role } {
  return { [ROLE_EXTENSION]: role }
}

export const UNAUTHENTICATED_MESSAGE =
  'Authentication required: send the header "Authorization: Bearer <token>" (on WebSocket: connectionParams.authorization).'

/** A token was sent but is not one this server accepts: say so, rather than ask for a header that was sent. */
export const INVALID_TOKEN_MESSAGE =
  'Invalid token: the bearer token sent is not one this server accepts. Use an API key, a token from SHOWRUNNER_TOKENS, or the admin token the server printed at start.'

export const MALFORMED_AUTHORIZATION_MESSAGE = 'Invalid Authorization header: expected "Bearer <token>".'

const MESSAGES: Record<RefusalReason, string> = {
  missing: UNAUTHENTICATED_MESSAGE,
  malformed: MALFORMED_AUTHORIZATION_MESSAGE,
  invalid: INVALID_TOKEN_MESSAGE,
  revoked: 'Invalid token: this API key was revoked. Ask an admin for a new key.',
  expired: 'Invalid token: this credential has expired. Ask an admin for a new key, or sign in again.',
  oidc: 'Invalid token: the identity token was refused',
}

/** The message for a refusal; an OIDC refusal says what was wrong with the token (safe: its holder sent it). */
export function refusalMessage(refusal: Refusal): string {
  if (refusal.reason === 'oidc') return `${MESSAGES.oidc} (${refusal.detail ?? 'not valid'}).`
  return MESSAGES[refusal.reason]
}

/**
 * The error for a request without a valid token, carrying HTTP 401 and a
 * `WWW-Authenticate` challenge for yoga to put on the response. Every reason
 * has the code UNAUTHENTICATED; the message tells them apart.
 */
export function unauthenticatedError(refusal: RefusalReason | Refusal = 'missing'): GraphQLError {
  const r = typeof refusal === 'string' ? { reason: refusal } : refusal
  return new GraphQLError(refusalMessage(r), {
    extensions: {
      code: ERROR_CODES.UNAUTHENTICATED,
      http: { status: 401, headers: { 'WWW-Authenticate': 'Bearer realm="showrunner"' } },
    },
  })
}

/** Who a refused request came from, as far as anyone can tell: never the token itself. */
export interface RefusedAuthentication {
  transport: 'http' | 'websocket'
  /** 'none' (no credential sent), 'unknown token' (one nobody issued), or why a known one was refused. */
  credential: 'none' | 'unknown token' | 'malformed' | 'revoked' | 'expired' | 'refused oidc token'
  /** For a refused OIDC token: what was wrong with it. */
  detail?: string
  operationName: string | null
  remote: string | null
}

/** How a refusal is logged: never the credential itself. */
export function refusedCredential(refusal: Refusal): RefusedAuthentication['credential'] {
  switch (refusal.reason) {
    case 'missing':
      return 'none'
    case 'malformed':
      return 'malformed'
    case 'revoked':
    case 'expired':
      return refusal.reason
    case 'oidc':
      return 'refused oidc token'
    default:
      return 'unknown token'
  }
}

/**
 * A refused authentication, at warn: the actor is always "anonymous" (no token
 * matched). Sampled (src/refusalSampler.ts): a line carries `suppressed`, the
 * refusals left out since the line before.
 */
export function logRefusedAuthentication(logger: Logger, what: RefusedAuthentication): void {
  const suppressed = refusals.take('authentication')
  if (suppressed === null) return
  logger.warn(
    { actor: 'anonymous', ...what, ...(suppressed > 0 && { suppressed }) },
    'refused authentication',
  )
}

/**
 * A refused authorisation: logged at warn and written to the audit table, at
 * most once per operation however many of its fields were refused (a document
 * of aliased forbidden fields must not turn into as many writes), and sampled
 * per actor (src/refusalSampler.ts): past 10 a minute they are counted, and
 * the next line and row carry `suppressed`.
 */
function recordForbidden(ctx: ApiContext, field: string, needed: Role, info: GraphQLResolveInfo): void {
  const principal = ctx.principal as NonNullable<ApiContext['principal']>
  const operationName = info.operation.name?.value ?? null
  const { logger, db } = ctx.services
  if (refusalAudited.has(ctx)) return
  refusalAudited.add(ctx)
  const suppressed = refusals.take(`authorisation|${principal.name}`)
  if (suppressed === null) return
  logger.warn(
    {
      actor: principal.name,
      role: principal.role,
      needed,
      field,
      operationName,
      ...(suppressed > 0 && { suppressed }),
    },
    'refused authorisation',
  )
  audit
    .record(db, {
      actor: principal.name,
      action: field.slice(0, 100),
      targetType: 'api',
      targetId: null,
      outcome: 'refused',
      detail: { operationName, role: principal.role, needed, ...(suppressed > 0 && { suppressed }) },
    })
    .catch((err: unknown) => logger.error({ err, field }, 'could not audit a refused authorisation'))
}
const refusalAudited = new WeakSet<ApiContext>()

function check(ctx: ApiContext, field: string, needed: Role, info: GraphQLResolveInfo): void {
  const principal = ctx.principal
  if (!principal) throw new AppError(ERROR_CODES.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
  if (!roleAllows(principal.role, needed)) {
    recordForbidden(ctx, field, needed, info)
    throw new AppError(
      ERROR_CODES.FORBIDDEN,
      `${field} needs the ${needed} role; ${principal.name} has the ${principal.role} role.`,
    )
  }
}

function timed<T>(ctx: ApiContext, field: string, run: () => T): T {
  const stop = ctx.services.metrics.resolverDuration.startTimer({ field })
  let result: T
  try {
    result = run()
  } catch (err) {
    stop()
    throw err
  }
  if (result instanceof Promise) {
    return result.finally(() => stop()) as T
  }
  stop()
  return result
}

/** Wrap every root field with its role check and timing; throws when a field declares no role. */
export function guardRootFields(schema: GraphQLSchema): GraphQLSchema {
  const roots = [schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()]
  for (const type of roots) {
    if (!type) continue
    for (const field of Object.values(type.getFields())) {
      const name = `${type.name}.${field.name}`
      const needed = field.extensions?.[ROLE_EXTENSION]
      if (typeof needed !== 'string' || !isRole(needed)) {
        throw new Error(
          `${name} declares no role: add \`extensions: requires('viewer' | 'operator' | 'admin')\`.`,
        )
      }
      if (field.subscribe) {
        const subscribe = field.subscribe as GraphQLFieldResolver<unknown, ApiContext>
        field.subscribe = (source, args, ctx, info) => {
          check(ctx, name, needed, info)
          return timed(ctx, name, () => subscribe(source, args, ctx, info))
        }
        // The per-event resolve only maps the payload; the caller was checked when subscribing.
        continue
      }
      const resolve = (field.resolve ?? defaultFieldResolver) as GraphQLFieldResolver<unknown, ApiContext>
      field.resolve = (source, args, ctx, info) => {
        check(ctx, name, needed, info)
        return timed(ctx, name, () => resolve(source, args, ctx, info))
      }
    }
  }
  return schema
}
