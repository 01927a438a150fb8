/**
 * The GraphQL server (graphql-yoga) with every guard it runs a request
 * through, in order: CSRF prevention, the auth gate, the subscription caps
 * (per principal, per instance), document limits (nesting,
 * tokens, depth, aliases), the query budget, error codes, the change signal
 * that wakes the live feeds after mutations, and the JIT executor.
 */
import { maxAliasesPlugin } from '@escape.tech/graphql-armor-max-aliases'
import { maxDepthPlugin } from '@escape.tech/graphql-armor-max-depth'
import { maxTokensPlugin } from '@escape.tech/graphql-armor-max-tokens'
import { GraphQLError, type GraphQLSchema, type ValidationContext } from 'graphql'
import {
  createGraphQLError,
  createYoga,
  type YogaInitialContext,
  type YogaServerInstance,
} from 'graphql-yoga'
import type { Principal } from '../auth.ts'
import type { Config } from '../config.ts'
import type { Authenticator } from '../identity/authenticator.ts'
import type { Logger } from '../log.ts'
import { useAnswerSizeCap } from './answerSize.ts'
import { type ChangeSignal, useChangeSignalAfterMutations } from './changeSignal.ts'
import { type ApiContext, type ApiServices, createApiContext } from './context.ts'
import { useEndSubscriptionsWithCredential } from './credentialEnd.ts'
import { useDocumentNestingLimit } from './documentLimits.ts'
import { API_CODES, createMaskError, useValidationErrorCodes } from './errors.ts'
import { renderSelfHostedGraphiQL } from './graphiql.ts'
import { useHtmlSecurityHeaders } from './htmlHeaders.ts'
import { CSRF_HEADER, principalOfRequest, useAuthGate, useCsrfPrevention } from './httpGuards.ts'
import { useQueryJit } from './jit.ts'
import { useQueryBudget } from './queryBudget.ts'
import { useRetryAfterHeader } from './retryAfter.ts'
import { SubscriptionCaps, useSubscriptionCaps } from './subscriptionCaps.ts'
import { WS_PRINCIPAL } from './ws.ts'

export const GRAPHQL_PATH = '/graphql'

/**
 * graphql-armor throws its rejection out of validation by default (so it reaches
 * clients as an HTTP 200 "Syntax Error"). Report it as the validation error it
 * is instead: HTTP 400, code GRAPHQL_VALIDATION_FAILED, with the variable that
 * raises the limit named.
 */
const armorReports = (variable: string) => ({
  propagateOnRejection: false,
  onReject: [
    (ctx: ValidationContext | null, err: GraphQLError) =>
      ctx?.reportError(
        new GraphQLError(`${err.message.replace(/^Syntax Error:\s*/, '')} (${variable})`, {
          extensions: { code: API_CODES.GRAPHQL_VALIDATION_FAILED },
        }),
      ),
  ],
})

/**
 * The token limit trips inside the parser, where there is no validation
 * context to report to: it throws the same validation error itself, which also
 * stops the parse at the first token past the limit.
 */
const tokenLimitReports = (limit: number) => ({
  propagateOnRejection: true,
  onReject: [
    () => {
      throw createGraphQLError(
        `Token limit of ${limit} exceeded: the document is too long (MAX_QUERY_TOKENS).`,
        { extensions: { code: API_CODES.GRAPHQL_VALIDATION_FAILED, http: { status: 400 } } },
      )
    },
  ],
})

export interface ApiYogaOptions {
  /** The built schema (src/api/schema.ts). */
  schema: GraphQLSchema
  config: Config
  logger: Logger
  authenticator: Authenticator
  changes: ChangeSignal
  services: ApiServices
}

/** The yoga instance behind `/graphql` (HTTP, SSE and, through src/api/ws.ts, WebSocket). */
// biome-ignore lint/suspicious/noExplicitAny: node:http server context
export function createApiYoga(opts: ApiYogaOptions): YogaServerInstance<any, ApiContext> {
  const { schema, config, logger, authenticator, changes, services } = opts
  const principalOf = (initial: YogaInitialContext & { [WS_PRINCIPAL]?: Principal }): Principal | null => {
    const fromWs = initial[WS_PRINCIPAL]
    if (fromWs) return fromWs
    // The auth gate identified the request before its document was parsed.
    return principalOfRequest(initial.request)
  }

  const yogaLog = logger.child({ component: 'graphql' })
  // biome-ignore lint/suspicious/noExplicitAny: node:http server context
  return createYoga<any, ApiContext>({
    schema,
    graphqlEndpoint: GRAPHQL_PATH,
    landingPage: false,
    multipart: false,
    maxRequestBodySize: config.maxBodyBytes,
    logging: {
      debug: (...args: unknown[]) => yogaLog.debug({ args }, 'yoga'),
      info: (...args: unknown[]) => yogaLog.debug({ args }, 'yoga'),
      warn: (...args: unknown[]) => yogaLog.warn({ args: args.map(String) }, 'yoga warning'),
      error: (...args: unknown[]) => yogaLog.debug({ err: args[0] }, 'yoga error'),
    },
    maskedErrors: { maskError: createMaskError(logger) },
    // Bearer tokens, not cookies: any origin may call with its own token, none gets ours.
    cors: {
      origin: '*',
      credentials: false,
      methods: ['GET', 'POST'],
      allowedHeaders: ['authorization', 'content-type', 'accept', CSRF_HEADER],
      maxAge: 600,
    },
    graphiql: {
      title: 'showrunner GraphiQL',
      // The page itself needs no token; every request it sends does. No
      // placeholder token in the headers: one was sent on open and the page
      // opened on "Invalid token"; without one the first answer says which
      // header to send, and the default query says where.
      headers: '{\n  \n}',
      defaultQuery: [
        '# Put your token in the Headers tab below, then run:',
        '#   { "Authorization": "Bearer <your token or API key>" }',
        '{ viewer { name role } }',
        '',
      ].join('\n'),
      defaultEditorToolsVisibility: 'headers',
      isHeadersEditorEnabled: true,
      shouldPersistHeaders: false,
    },
    // Every asset from this server: GraphiQL works with no network beyond it.
    renderGraphiQL: renderSelfHostedGraphiQL,
    context: (initial) =>
      createApiContext(
        services,
        principalOf(initial),
        initial.request?.headers.get('x-showrunner-client') === 'console' ? 'console' : 'api',
      ),
    plugins: [
      useCsrfPrevention([CSRF_HEADER]),
      useAuthGate(authenticator, logger.child({ component: 'auth' })),
      useSubscriptionCaps(
        new SubscriptionCaps({
          perPrincipal: config.limits.subscriptionsPerPrincipal,
          perInstance: config.limits.subscriptionsPerInstance,
          logger: logger.child({ component: 'graphql' }),
        }),
      ),
      useEndSubscriptionsWithCredential(authenticator),
      useDocumentNestingLimit(),
      maxTokensPlugin({ n: config.limits.maxTokens, ...tokenLimitReports(config.limits.maxTokens) }),
      maxDepthPlugin({
        n: config.limits.maxDepth,
        // Introspection nests `ofType` deeper than any query needs; the query
        // budget bounds it instead (one __schema, list nesting at most 3).
        ignoreIntrospection: true,
        flattenFragments: true,
        ...armorReports('MAX_QUERY_DEPTH'),
      }),
      maxAliasesPlugin({ n: config.limits.maxAliases, ...armorReports('MAX_QUERY_ALIASES') }),
      useQueryBudget({
        maxCost: config.limits.maxCost,
        maxOccurrences: config.limits.maxOccurrences,
        maxAnswerBytes: config.limits.maxAnswerBytes,
        maxParamsBytes: config.limits.maxParamsBytes,
        maxProgramBytes: config.maxBodyBytes,
      }),
      useAnswerSizeCap(config.limits.maxAnswerBytes),
      useRetryAfterHeader(),
      useHtmlSecurityHeaders(),
      useValidationErrorCodes(),
      useChangeSignalAfterMutations(changes),
      useQueryJit({
        onCompileError: (operationName, errors) =>
          yogaLog.warn(
            { operationName, errors: errors.map(String).slice(0, 3) },
            'graphql-jit could not compile a query; it runs on graphql-js',
          ),
      }),
    ],
  })
}
