/** What the thin root fields hand to `src/`: dependencies and the caller's actor name. */

import { UNAUTHENTICATED_MESSAGE } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import type { Principal } from '../src/auth.ts'
import { AppError, ERROR_CODES } from '../src/errors.ts'
import type { DefinitionDeps } from '../src/operations/definitions.ts'
import type { ControlDeps } from '../src/operations/runControls.ts'

/**
 * The name a mutation is recorded under: the person's name (an API key's or
 * an SSO user's, a named bootstrap token's), or `operator#1a2b3c4d` for an
 * unnamed bootstrap token. Never the credential.
 */
export function actorOf(ctx: ApiContext): string {
  return principalOf(ctx).name
}

/** The caller (name, role, teams); throws UNAUTHENTICATED when there is none. */
export function principalOf(ctx: ApiContext): Principal {
  if (!ctx.principal) throw new AppError(ERROR_CODES.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
  return ctx.principal
}

export function controlDeps(ctx: ApiContext): ControlDeps {
  const s = ctx.services
  return {
    db: s.db,
    clock: s.clock,
    nudge: () => s.nudge(),
    handOff: s.handOff,
    maxParamsBytes: s.maxParamsBytes,
    quota: s.runQuota,
  }
}

export function definitionDeps(ctx: ApiContext): DefinitionDeps {
  const s = ctx.services
  return {
    db: s.db,
    registry: s.registry,
    clock: s.clock,
    horizonMs: s.horizonMs,
    nudgeMaterialise: () => s.requestMaterialise(),
    webhookAllow: s.notifications.webhookAllow,
  }
}
