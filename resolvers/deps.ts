/** What the thin root fields hand to `src/`: dependencies and the caller's actor name. */

import { UNAUTHENTICATED_MESSAGE } from '../src/api/authz.ts'
import type { ApiContext } from '../src/api/context.ts'
import { AppError, ERROR_CODES } from '../src/errors.ts'
import type { DefinitionDeps } from '../src/operations/definitions.ts'
import type { ControlDeps } from '../src/operations/runControls.ts'

/** The name a mutation is recorded under (`operator#1a2b3c4d`): the token's role and hash, never the token. */
export function actorOf(ctx: ApiContext): string {
  if (!ctx.principal) throw new AppError(ERROR_CODES.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
  return ctx.principal.actor
}

export function controlDeps(ctx: ApiContext): ControlDeps {
  const s = ctx.services
  return {
    db: s.db,
    clock: s.clock,
    nudge: () => s.nudge(),
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
  }
}
