/**
 * Where the executor's decisions (decide.ts) become rows: collected and
 * written set-wise, a few multi-row statements per round of a batch (a batch
 * of one included), by {@link BufferedWriter} and, as outcomes arrive, by
 * {@link GroupWriter}. What fails a run is written by failure.ts instead.
 */
import { type CountedStatement, checkAffected, type Db, isDbUnavailable } from '../../../sql/db.ts'
import type { NewLog } from '../../../sql/eventRunLogs.ts'
import * as logs from '../../../sql/eventRunLogs.ts'
import * as runs from '../../../sql/eventRuns/index.ts'
import * as steps from '../../../sql/eventSteps/index.ts'
import * as receipts from '../../../sql/flushReceipts.ts'
import type { PhaseMove } from './decide.ts'

export interface StepWriter {
  /** Move the run's phase (or into `ending`) as it begins a step of another phase. */
  movePhase(runId: number, move: PhaseMove): Promise<void>
  /** The run has no step left: `running | ending → completed`, guarded (a cancel that won stays). */
  finishRun(runId: number): Promise<void>
  /**
   * A step answered `completed`. True when the row moved; a buffered writer
   * answers true and learns the guard's answer only when it flushes.
   */
  complete(stepId: number, result: unknown): Promise<boolean>
  /** One line of the run's log. */
  log(line: NewLog): Promise<void>
}

/**
 * How long the executor keeps trying to write down the outcome of a step that
 * has already run, while the database cannot be reached. Until it is written
 * the step still looks "executing", and once its lease expires it runs again:
 * for a webhook, a second call. Any re-execution needs the database as well,
 * so waiting out a short outage here turns "the database blinked" into
 * "nothing ran twice" (the db-outage drill, test/drills/dbOutage.drill.test.ts).
 * Longer outages, and a runner whose stop grace ran out, fall back to
 * at-least-once under the same idempotency key.
 */
export const RECORD_RETRY_MS = 120_000

/**
 * Write a step's outcome, retrying (100 ms doubling to 1 s, real time) while the
 * database is unavailable, for up to {@link RECORD_RETRY_MS} or until the hard stop.
 * Any other error is thrown at once.
 */
export async function recordOutcome<T>(hardStop: AbortSignal, write: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + RECORD_RETRY_MS
  let delay = 100
  for (;;) {
    try {
      return await write()
    } catch (err) {
      if (!isDbUnavailable(err) || hardStop.aborted || Date.now() + delay > deadline) throw err
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer)
          hardStop.removeEventListener('abort', done)
          resolve()
        }
        const timer = setTimeout(done, delay)
        hardStop.addEventListener('abort', done, { once: true })
      })
      delay = Math.min(delay * 2, 1000)
    }
  }
}

/** What a flush tells once its transaction is committed. */
export interface FlushListeners {
  /** Steps were parked on a person (written, so readers see them now). */
  parked?: () => void
  /** These runs' claims were given back by the flush ({@link BufferedWriter.giveBack}). */
  givenBack?: (runs: readonly GivenBack[]) => void
}

/** A run's claim given back by a flush: whose, under which token, due when. */
export interface GivenBack {
  id: number
  owner: string
  token: string | null
  wakeAt: Date | null
}

/** `items` grouped by `keyOf`, each group in the order given. */
function groupBy<T, K>(items: readonly T[], keyOf: (item: T) => K): Map<K, T[]> {
  const out = new Map<K, T[]>()
  for (const item of items) {
    const key = keyOf(item)
    const group = out.get(key)
    if (group) group.push(item)
    else out.set(key, [item])
  }
  return out
}

/**
 * Writes collected and made set-wise by {@link BufferedWriter.flush}: one
 * statement per (move, phase) group, one INSERT of log lines, one UPDATE of
 * completed steps (with their results), one of steps set aside on a timer or a
 * person and one of failed attempts (each a few hundred rows at most).
 */
export class BufferedWriter implements StepWriter {
  private endingMoves: [string, number][] = []
  private phaseMoves: [string, number][] = []
  private finished: number[] = []
  private lines: NewLog[] = []
  private completed: { id: number; result: unknown }[] = []
  private setAside: { id: number; until: Date | null; parked: boolean }[] = []
  private failedAttempts: { id: number; error: string; retryAt: Date | null }[] = []
  private restored: number[] = []
  private givenBack: GivenBack[] = []

  constructor(
    private readonly db: Pick<Db, 'commitAll' | 'query'>,
    private readonly hardStop: AbortSignal,
    private readonly told: FlushListeners = {},
  ) {}

  async movePhase(runId: number, move: PhaseMove): Promise<void> {
    ;(move.to === 'ending' ? this.endingMoves : this.phaseMoves).push([move.phase, runId])
  }

  async finishRun(runId: number): Promise<void> {
    this.finished.push(runId)
  }

  async complete(stepId: number, result: unknown): Promise<boolean> {
    this.completed.push({ id: stepId, result })
    return true
  }

  async log(line: NewLog): Promise<void> {
    this.lines.push(line)
  }

  /** A step answered `sleep` (a timer, due at `until`) or `park` (on a person; `until` is its timeout). */
  setAsideStep(stepId: number, until: Date | null, parked: boolean): void {
    this.setAside.push({ id: stepId, until, parked })
  }

  /**
   * A failed attempt: retried at `retryAt`, or failed for good when null (the
   * run goes on degraded); either way its run is degraded once it is written.
   */
  failAttempt(stepId: number, error: string, retryAt: Date | null): void {
    this.failedAttempts.push({ id: stepId, error, retryAt })
  }

  /**
   * Give the run's claim back in this flush, due at `wakeAt` (a cue's
   * timeout; null: when its person acts): a run parked on a person is free
   * the moment its cue can be seen, so a GO that comes at once can take the
   * run for its next step (handOff.ts) instead of finding it still held.
   * Guarded by the claim's owner and token: a claim lost meanwhile, or one
   * taken since, is not given back.
   */
  giveBack(run: { id: number; claimToken: string | null }, owner: string, wakeAt: Date | null): void {
    this.givenBack.push({ id: run.id, token: run.claimToken, owner, wakeAt })
  }

  /** A retried step of this run succeeded: the run is `ok` again unless another step keeps it degraded. */
  restoreHealth(runId: number): void {
    this.restored.push(runId)
  }

  /** True when nothing is collected. */
  isEmpty(): boolean {
    return (
      this.finished.length === 0 &&
      this.endingMoves.length === 0 &&
      this.phaseMoves.length === 0 &&
      this.lines.length === 0 &&
      this.completed.length === 0 &&
      this.setAside.length === 0 &&
      this.failedAttempts.length === 0 &&
      this.restored.length === 0 &&
      this.givenBack.length === 0
    )
  }

  /**
   * Write what was collected as one transaction, in one round trip (its
   * BEGIN and COMMIT in the same text): runs finished (their keys released),
   * phases moved, log lines, the steps' outcomes, then the runs' health as
   * their steps' rows now say. Kept or lost together, so it is sent again
   * whole while the database is unavailable (see {@link recordOutcome}): a
   * lost outcome would run its step again. A COMMIT whose answer was lost
   * may have been kept: its guarded moves would match nothing the second
   * time, nor would its claims given back, but its log lines are plain
   * INSERTs. So a flush with lines writes a receipt in its transaction
   * (sql/flushReceipts.ts), and one sent again first looks for it: there,
   * the first sending was kept and nothing is sent. Answers whether it
   * wrote anything.
   */
  async flush(): Promise<boolean> {
    const collected = this.statements()
    const parked = this.setAside.some((r) => r.parked)
    const givenBack = this.givenBack
    const receipt = this.lines.length > 0 ? receipts.newFlushReceipt() : null
    this.clear()
    if (collected.length === 0) return false
    const statements = receipt ? [receipts.writeReceiptStatement(receipt), ...collected] : collected
    let sent = false
    const answers = await recordOutcome(this.hardStop, async () => {
      if (sent && receipt && (await receipts.wasKept(this.db, receipt))) return null
      sent = true
      return this.db.commitAll(statements, { retryable: true })
    })
    // Kept by a sending whose answer was lost: its counts are unknown, and were right then.
    if (answers) for (const [i, st] of statements.entries()) checkAffected(st, answers[i]?.affectedRows ?? 0)
    // Before anyone is told of the park: whoever holds these claims must not
    // give them back again (by then they may be a GO's hand-over).
    if (givenBack.length > 0) this.told.givenBack?.(givenBack)
    // A parked cue is news to its owner's inbox now, not when the whole batch
    // (its other runs' rounds, its stragglers) is done.
    if (parked) this.told.parked?.()
    return true
  }

  /** What was collected, as statements in the order one run's steps need. */
  private statements(): CountedStatement[] {
    const out: CountedStatement[] = [
      ...runs.transitionManyStatements(this.finished, ['running', 'ending'], 'completed'),
    ]
    const ids = (moves: readonly [string, number][]) => moves.map(([, id]) => id)
    for (const [phase, moves] of groupBy(this.endingMoves, ([p]) => p))
      out.push(...runs.transitionManyStatements(ids(moves), 'running', 'ending', { phase }))
    for (const [phase, moves] of groupBy(this.phaseMoves, ([p]) => p))
      out.push(...runs.setPhaseManyStatements(ids(moves), phase))
    out.push(...logs.appendManyStatements(this.lines))
    out.push(...steps.completeManyStatements(this.completed))
    out.push(...steps.setAsideManyStatements(this.setAside))
    out.push(...steps.failAttemptsStatements(this.failedAttempts))
    out.push(...runs.degradeForStepsStatements(this.failedAttempts.map((f) => f.id)))
    out.push(...runs.restoreHealthOfStatements(this.restored))
    // After the steps set aside: the claims go with the parks they follow,
    // one guarded statement per (owner, token).
    for (const group of groupBy(this.givenBack, (g) => JSON.stringify([g.owner, g.token])).values())
      out.push(...runs.releaseClaimsAtStatements(group, group[0]?.owner ?? '', group[0]?.token ?? null))
    return out
  }

  private clear(): void {
    this.givenBack = []
    this.setAside = []
    this.failedAttempts = []
    this.restored = []
    this.finished = []
    this.endingMoves = []
    this.phaseMoves = []
    this.lines = []
    this.completed = []
  }
}

/**
 * Writes that arrive one by one (a round's steps settling in their own time),
 * made set-wise as they come, like a database's group commit: while one flush
 * is under way, whatever arrives is collected and written by the next. Under
 * load each flush carries many rows; when it is quiet, an outcome is written
 * at the end of the turn it is known in, with whatever else settled in that
 * turn. Either way a step's outcome is not held back until
 * the slowest step of its round answers (a crash then would run it again).
 */
export class GroupWriter {
  private buffer: BufferedWriter
  private draining: Promise<void> | null = null
  private failure: unknown = null

  constructor(
    private readonly db: Pick<Db, 'commitAll' | 'query'>,
    private readonly hardStop: AbortSignal,
    private readonly told: FlushListeners = {},
  ) {
    this.buffer = new BufferedWriter(db, hardStop, told)
  }

  /** Collect writes for the next flush (BufferedWriter's methods collect at once), and start it unless one is under way. */
  add(collect: (writer: BufferedWriter) => void): void {
    collect(this.buffer)
    this.draining ??= this.drain()
  }

  private async drain(): Promise<void> {
    // Begin after this turn of the event loop: the steps of a round that settle
    // together (a round of cues, answered at once by their ladders) are written
    // by one flush, not the first alone and the rest after it.
    await new Promise<void>((resolve) => setImmediate(resolve))
    try {
      while (!this.buffer.isEmpty()) {
        const batch = this.buffer
        this.buffer = new BufferedWriter(this.db, this.hardStop, this.told)
        await batch.flush()
      }
    } catch (err) {
      // Kept for settled(), which the caller awaits before it goes on.
      this.failure ??= err
    } finally {
      this.draining = null
    }
  }

  /** Wait until everything added so far is written; throws the first flush's error, if one failed. */
  async settled(): Promise<void> {
    while (this.draining) await this.draining
    if (this.failure !== null) throw this.failure
  }
}
