/**
 * Starting due runs that cannot start in a batch: runs with a concurrency key
 * (each needs its key lock, taken with its claim) and runs under an overlap
 * policy (each decides under its scope's lock), claimed one by one. A run
 * found blocked is rotated behind newly due ones (its grace window still
 * decides), and its log names its holder once, not every tick.
 */
import type { Db } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { RunRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { RunnerObserver } from './types.ts'

export interface KeyedStartDeps {
  db: Db
  instanceId: string
  /** How long a blocked or held run waits before it is looked at again. */
  tickMs: number
  observer?: RunnerObserver
  /** True once the runner is stopping: claim nothing more. */
  stopping: () => boolean
}

export class KeyedStarter {
  /** runId → holder run id already logged, so a blocked run's log names its holder once. */
  private readonly blockedLogged = new Map<number, number>()

  constructor(private readonly deps: KeyedStartDeps) {}

  /** These runs left `scheduled` another way (missed): nothing more to remember about them. */
  forget(ids: readonly number[]): void {
    for (const id of ids) this.blockedLogged.delete(id)
  }

  /**
   * Claim the due keyed and overlap-policy runs this instance can start now.
   * Answers them as claimed (`starting`, under this instance's lease), and
   * tells `onClaimed` of each as its claim commits (so a pass that fails
   * part-way still gives it back).
   */
  async claimDue(
    now: Date,
    leaseUntil: Date,
    limit: number,
    onClaimed: (run: RunRow) => void = () => {},
  ): Promise<RunRow[]> {
    const { db, instanceId, observer } = this.deps
    const claimed: RunRow[] = []
    // Their own query, so no backlog of key-less runs can hide them past their grace.
    const due = await runs.findDueKeyed(db, now, limit)
    // A key found held (or just taken) stays held for the rest of this pass, so
    // the other runs waiting on it are deferred without a claim transaction each.
    const holderOfKey = new Map<string, number>()
    for (const run of due) {
      // Keyed runs, and runs under an overlap policy (they decide one by one, under their scope's lock).
      if (run.status !== 'scheduled' || (!run.concurrencyKey && !run.overlap)) continue
      if (this.deps.stopping()) break
      const knownHolder = run.concurrencyKey ? holderOfKey.get(run.concurrencyKey) : undefined
      if (knownHolder !== undefined) {
        await this.noteBlocked(run, knownHolder, now)
        continue
      }
      const answer = await runs.claimStart(db, run, instanceId, leaseUntil, now)
      if (answer.overlap) await this.noteOverlap(run, answer.overlap, now)
      if (answer.claimed) {
        this.blockedLogged.delete(run.id)
        if (run.concurrencyKey) holderOfKey.set(run.concurrencyKey, run.id)
        // expandStartingRuns re-reads every claimed run, so the claim's own effect is all it needs here.
        const mine: RunRow = { ...run, status: 'starting', claimedBy: instanceId, claimExpiresAt: leaseUntil }
        onClaimed(mine)
        claimed.push(mine)
      } else if (answer.overlap) {
        // Decided by the overlap policy (and logged above).
      } else if (answer.blockedBy !== null && run.concurrencyKey) {
        observer?.claimConflict?.()
        holderOfKey.set(run.concurrencyKey, answer.blockedBy)
        await this.noteBlocked(run, answer.blockedBy, now)
      } else {
        observer?.claimConflict?.()
      }
    }
    return claimed
  }

  /** Remember that `run`'s log names `holderId`; false when it already does. */
  private firstNoteOf(runId: number, holderId: number): boolean {
    if (this.blockedLogged.get(runId) === holderId) return false
    if (this.blockedLogged.size > 10_000) this.blockedLogged.clear()
    this.blockedLogged.set(runId, holderId)
    return true
  }

  /** Record what a run's overlap policy decided, on the runs it touched; a held run waits a tick. */
  private async noteOverlap(run: RunRow, decided: runs.OverlapOutcome, now: Date): Promise<void> {
    const { db } = this.deps
    const actor = this.deps.instanceId
    switch (decided.outcome) {
      case 'skipped':
        await logs.append(db, {
          runId: run.id,
          level: 'warn',
          message: `missed: run ${decided.holderId} of this definition and scope was still in progress (overlap policy SKIP)`,
          actor,
          data: { holderRunId: decided.holderId, overlap: 'skip' },
        })
        return
      case 'superseded':
        await logs.append(db, {
          runId: run.id,
          level: 'warn',
          message: `missed: newer run ${decided.heldId} is held until run ${decided.holderId} ends (overlap policy BUFFER_ONE)`,
          actor,
          data: { heldRunId: decided.heldId, holderRunId: decided.holderId, overlap: 'buffer_one' },
        })
        return
      case 'held': {
        await runs.deferStart(db, run.id, new Date(now.getTime() + this.deps.tickMs))
        if (decided.supersededId !== null) {
          await logs.append(db, {
            runId: decided.supersededId,
            level: 'warn',
            message: `missed: newer run ${run.id} came due while run ${decided.holderId} was still in progress (overlap policy BUFFER_ONE)`,
            actor,
            data: { newerRunId: run.id, holderRunId: decided.holderId, overlap: 'buffer_one' },
          })
        }
        if (!this.firstNoteOf(run.id, decided.holderId)) return
        await logs.append(db, {
          runId: run.id,
          level: 'info',
          message: `held until run ${decided.holderId} is out of the way (overlap policy BUFFER_ONE)`,
          actor,
          data: { holderRunId: decided.holderId, overlap: 'buffer_one' },
        })
        return
      }
      case 'cancelled':
        await logs.append(db, {
          runId: decided.cancelledId,
          level: 'warn',
          message: `cancelled: newer run ${run.id} of this definition and scope came due (overlap policy CANCEL_OTHER)`,
          actor,
          data: { newerRunId: run.id, overlap: 'cancel_other' },
        })
        return
    }
  }

  private async noteBlocked(run: RunRow, holderId: number, now: Date): Promise<void> {
    const { db } = this.deps
    // Rotate blocked runs behind newly due ones; their grace window still decides.
    await runs.deferStart(db, run.id, new Date(now.getTime() + this.deps.tickMs))
    if (!this.firstNoteOf(run.id, holderId)) return
    await logs.append(db, {
      runId: run.id,
      level: 'info',
      message: `waiting for concurrency key "${run.concurrencyKey}", held by run ${holderId}`,
      actor: this.deps.instanceId,
      data: { holderRunId: holderId, key: run.concurrencyKey },
    })
  }
}
