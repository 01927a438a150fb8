/**
 * Retry a FAILED run from a step: a new run of the same version, scope and
 * params, starting now, linked to the original by `retryOf`. Steps before
 * `fromStep` (default: the step that failed) are written SKIPPED with a result
 * naming the original run, so no earlier webhook is sent again; the rest run
 * as in any run. One retry per original: retrying again answers the same run,
 * also when several retries of one original race (each answers the winner's).
 *
 * The new run is written with its steps and put in `starting`, due now, the
 * state of a start that was interrupted after its claim: the runner leases it
 * and goes on from its first unfinished step. Because it skips the ordinary
 * claim, it takes its concurrency key here, in the same transaction, and is
 * refused (CONFLICT, naming the holder) while another run holds the key or,
 * under an overlap policy other than ALLOW_ALL, while another run of its
 * scope is in progress: start it again when that one ends.
 */
import * as audit from '../../sql/auditLog.ts'
import { DB_ERRNO, type Db, isDbErrno } from '../../sql/db.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { RunListRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import { AppError, badInput, conflict, notFound } from '../errors.ts'
import type { Clock } from '../runner/clock.ts'
import { specsForVersion } from '../runner/expand.ts'
import type { RunQuota } from '../runQuota.ts'

export interface RetryDeps {
  db: Db
  clock: Clock
  nudge?: () => void
  /** Runs per principal per minute (MAX_RUNS_PER_MINUTE); none in library use. */
  quota?: RunQuota
}

export interface RetryInput {
  id: number
  /** The `seq` of the first step to run again; default the failed step. */
  fromStep?: number | null
  actor: string
}

class Refused extends Error {
  constructor(readonly error: AppError) {
    super(error.message)
  }
}

export async function retryRun(deps: RetryDeps, input: RetryInput): Promise<RunListRow> {
  try {
    return await retry(deps, input)
  } catch (err) {
    if (err instanceof AppError)
      await audit.record(deps.db, {
        actor: input.actor,
        action: 'retryRun',
        targetType: 'run',
        targetId: String(input.id),
        outcome: 'refused',
        detail: { code: err.code, reason: err.message.slice(0, 1000) },
      })
    throw err
  }
}

async function retry(deps: RetryDeps, input: RetryInput): Promise<RunListRow> {
  const original = await runs.getById(deps.db, input.id)
  if (!original) throw notFound('run', input.id)
  const existing = await runs.retryOf(deps.db, original.id)
  if (existing !== null) return (await runs.getById(deps.db, existing)) as RunListRow
  if (original.status !== 'failed')
    throw conflict(
      `Run ${original.id} is ${original.status.toUpperCase()}; only a FAILED run can be retried.`,
    )
  const specs = await specsForVersion(deps.db, original.versionId)
  const before = await steps.listForRun(deps.db, original.id)
  const failedStep = before.find((s) => s.status === 'failed')
  const firstUnfinished = before.find((s) => s.status !== 'completed' && s.status !== 'skipped')
  const fromStep = input.fromStep ?? failedStep?.seq ?? firstUnfinished?.seq ?? 0
  if (!Number.isInteger(fromStep) || fromStep < 0 || fromStep >= specs.length)
    throw badInput(
      `fromStep must be the seq of one of the run's steps, 0 to ${specs.length - 1}; got ${fromStep}.`,
    )
  const def = await definitions.getById(deps.db, original.definitionId)
  if (!def) throw notFound('definition', original.definitionId)
  const now = deps.clock.now()
  let id: number
  try {
    id = await deps.db.transaction(
      async (tx) => {
        if ((await definitions.lockForNewRuns(tx, def.id)) === 'archived')
          throw new Refused(
            conflict(`Definition "${def.slug}" is archived; set it ACTIVE to retry its runs.`),
          )
        if (def.overlap !== 'allow_all' && !original.rehearsal) {
          const busy = await runs.inProgressOfScope(tx, def.id, original.scope)
          if (busy !== null)
            throw new Refused(
              conflict(
                `Run ${busy} of this definition and scope is in progress and its overlap policy is ${def.overlap.toUpperCase()}; retry when it ends.`,
                { runId: String(busy) },
              ),
            )
        }
        // A retry creates a run: it counts against the caller's runs per
        // minute, in this transaction, so a retry refused here (archived, its
        // scope busy, its key held, a concurrent retry first) takes nothing.
        await deps.quota?.take(input.actor, 1, tx)
        const newId = await runs.materialise(tx, {
          definitionId: def.id,
          versionId: original.versionId,
          scope: original.scope,
          scheduledFor: now,
          timezone: original.timezone,
          concurrencyKey: original.concurrencyKey,
          params: original.params,
          rehearsal: original.rehearsal,
          startedBy: input.actor,
        })
        if (newId === null)
          throw new Refused(conflict('Another run of this scope starts at this very instant; retry.'))
        if (original.concurrencyKey && !original.rehearsal) {
          const holder = await runs.takeKey(tx, original.concurrencyKey, newId)
          if (holder !== null)
            throw new Refused(
              conflict(
                `Concurrency key "${original.concurrencyKey}" is held by run ${holder}; retry when it ends.`,
                { holderId: String(holder) },
              ),
            )
        }
        await steps.expand(tx, [{ runId: newId, specs }])
        await steps.skipBefore(tx, newId, fromStep, {
          skipped: true,
          retryOf: String(original.id),
          reason: `done by run ${original.id}, which this run retries`,
        })
        await runs.startAsRetry(tx, newId, original.id, now)
        if (original.speed !== 1) await runs.setSpeed(tx, newId, original.speed)
        return newId
      },
      { retryable: true },
    )
  } catch (err) {
    // Retries of one original at once: one wins, and the others answer its
    // run. A loser meets the winner at the retry record (DUP_ENTRY), or
    // earlier at what the winner took first (its key, its scope's overlap
    // guard, its instant), which refuses it naming the winner's own run;
    // once the winner has committed, the record says so.
    if (err instanceof Refused || isDbErrno(err, DB_ERRNO.DUP_ENTRY)) {
      const winner = await runs.retryOf(deps.db, original.id)
      if (winner !== null) return (await runs.getById(deps.db, winner)) as RunListRow
    }
    if (err instanceof Refused) throw err.error
    throw err
  }
  await logs.appendMany(deps.db, [
    {
      runId: id,
      message: `retry of run ${original.id} from step ${fromStep} by ${input.actor}`,
      actor: input.actor,
      data: { retryOf: String(original.id), fromStep },
    },
    {
      runId: original.id,
      message: `retried as run ${id} from step ${fromStep} by ${input.actor}`,
      actor: input.actor,
      data: { retry: String(id), fromStep },
    },
  ])
  await audit.record(deps.db, {
    actor: input.actor,
    action: 'retryRun',
    targetType: 'run',
    targetId: String(original.id),
    outcome: 'ok',
    detail: { retry: String(id), fromStep },
  })
  deps.nudge?.()
  return (await runs.getById(deps.db, id)) as RunListRow
}
