/**
 * What every resolver sees: the caller (`principal`), the process-wide services
 * (`services`, built once by `buildApp`) and per-request DataLoaders (`loaders`,
 * built fresh for each operation so nothing is cached across requests).
 */

import type { Db } from '../../sql/db.ts'
import type { Principal } from '../auth.ts'
import type { Authenticator } from '../identity/authenticator.ts'
import type { Logger } from '../log.ts'
import type { Metrics } from '../metrics.ts'
import type { Clock } from '../runner/clock.ts'
import type { RunHandOff } from '../runner/handOff.ts'
import type { StepRegistry } from '../runner/steps/registry.ts'
import type { RunQuota } from '../runQuota.ts'
import type { InboxFeed } from './inboxFeed.ts'
import { createLoaders, type Loaders } from './loaders.ts'
import type { RunChangeFeed } from './runChangeFeed.ts'
import type { StatusPoller } from './statusPoller.ts'

/** Process-wide dependencies of the API, shared by every request. */
export interface ApiServices {
  db: Db
  /** Who a credential belongs to; also the API keys' cache (revoking through it is seen here at once). */
  authenticator: Authenticator
  registry: StepRegistry
  clock: Clock
  metrics: Metrics
  poller: StatusPoller
  /** The one poller behind every `runChanges` subscription. */
  runChanges: RunChangeFeed
  /** The one poller behind every `waitingSteps` subscription. */
  inbox: InboxFeed
  logger: Logger
  /** The runner's tick, for the `health.runners` liveness window. */
  tickMs: number
  /** Materialisation look-ahead, passed to definition changes. */
  horizonMs: number
  /** Schedule occurrences one request may compute in all (MAX_OCCURRENCES_PER_REQUEST). */
  maxOccurrences: number
  /** Largest run `params` accepted, in bytes (MAX_PARAMS_BYTES). */
  maxParamsBytes: number
  /** Runs created per principal per minute (MAX_RUNS_PER_MINUTE), taken by every mutation that creates runs. */
  runQuota: RunQuota
  /** Wake the co-hosted runner (a run was started, a cue resolved); a no-op with RUNNER=off. */
  nudge(): void
  /** The co-hosted runner, to which a cue's answer hands its run; none with RUNNER=off. */
  handOff?: RunHandOff
  /** Ask the co-hosted runner to materialise at its next tick (a definition changed). */
  requestMaterialise(): void
  /** Notification channels: what their targets are checked against, and the local dispatcher's wake-up. */
  notifications: { webhookAllow: readonly string[]; nudge(): void }
}

export interface ApiContext {
  /** Who is calling; null only for a request that did not authenticate (refused by the guards). */
  principal: Principal | null
  services: ApiServices
  loaders: Loaders
  /** What this request may still compute (see src/api/queryBudget.ts). */
  budget: { occurrencesLeft: number }
  /** `console` when the built-in console sent it (its `x-showrunner-client` header): how a cue answer records `via`. */
  client: 'api' | 'console'
}

export function createApiContext(
  services: ApiServices,
  principal: Principal | null,
  client: 'api' | 'console' = 'api',
): ApiContext {
  return {
    client,
    principal,
    services,
    loaders: createLoaders(services.db),
    budget: { occurrencesLeft: services.maxOccurrences },
  }
}
