/**
 * Advancing held runs: the one path every run this instance holds takes, many
 * runs together or a batch of one. A top-of-the-hour show for thousands of
 * scopes (announce, wait, call out, wrap up) is as many rounds as it has
 * steps, whatever the number of runs, each round a few multi-row statements.
 *
 * Each round: re-read the statuses of the batch in one query (a pause or
 * cancel lands before the next step), read each run's next step, finish the
 * runs with none left, let go the ones whose step is not due yet, move
 * phases, renew the runs' leases when a step may outlast them, begin (or, for
 * a timer that came due, resume) every step set-wise, make the attempts (at
 * most `stepConcurrency` at once, executor/round.ts; each one through
 * executor/attempt.ts), and write their outcomes and log lines set-wise as
 * they come (executor/recording.ts, through executor/writer.ts
 * `GroupWriter`). Runs whose step is done take the next round; the others
 * are let go, each answered once with when it next needs the runner.
 *
 * The rules are executor/decide.ts's; what it decides is written set-wise,
 * guarded: steps begin only from `pending` (or from an owner whose lease ran
 * out), resume only from a due timer, complete or set aside only from
 * `running`; runs finish through the guarded `running | ending → completed`.
 * A retry (or a failure for good under `onError: degrade`) is written with the
 * round; a failure that fails its run, and an attempt cut short by a shutdown,
 * are written at once by executor/failure.ts, which decides the run's fate.
 *
 * A straggler (a step far slower than its round, executor/round.ts) does not
 * hold the round: when it answers, its outcome is written the same way, and
 * its run re-enters this path as a batch of one.
 *
 * What it answers: `onAnswer` is told once per run, as soon as the run is let
 * go and its writes are made, so its claim can be given back then. A run the
 * batch could not answer for (it failed part-way) is not told: the caller
 * gives those back when the batch returns or throws.
 */
import { isDbUnavailable } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import { type AttemptResult, attempt } from './executor/attempt.ts'
import { entryOf, isAdvancing, notYet, phaseMove, resumesWithoutLease } from './executor/decide.ts'
import { type Entry, type OnAnswer, Recording, resultOf } from './executor/recording.ts'
import { executeRound, type Settled } from './executor/round.ts'
import { BufferedWriter, recordOutcome, type StepWriter } from './executor/writer.ts'
import { mustRenew, roundLeaseMs, stepNeedMs } from './roundLease.ts'
import { type ClaimedRun, DEFAULT_STEP_CONCURRENCY, type EngineDeps, type RunAnswer } from './types.ts'

export type { OnAnswer } from './executor/recording.ts'

/**
 * Advance `claimed` (held by this instance) until each sleeps, parks, finishes,
 * fails, is no longer ours, or has spent its step budget. Resolves once every
 * run is answered, stragglers included; rejects (after those) when a
 * statement the batch shares failed, its unanswered runs let go as they are.
 */
export async function advanceBatch(
  deps: EngineDeps,
  claimed: readonly ClaimedRun[],
  onAnswer: OnAnswer,
  how: FirstRound = {},
): Promise<void> {
  const answered = new Set<number>()
  const held: Held = {
    tell: (run, answer) => {
      answered.add(run.id)
      onAnswer(run, answer)
    },
    answered,
    continuations: [],
    straggling: new Set(),
  }
  let failure: { err: unknown } | null = null
  try {
    await rounds(deps, claimed, held, how.leaseEnds, how)
  } catch (err) {
    failure = { err }
    // Nothing more of this batch is advanced now: what no straggler holds is
    // let go as it is at once, not after the stragglers.
    for (const run of claimed)
      if (!answered.has(run.id) && !held.straggling.has(run.id)) held.tell(run, { stop: true })
  }
  // Stragglers hold claims of their own: they finish before the batch answers,
  // whatever became of it (each answers its own errors; more may join as they go).
  for (let i = 0; i < held.continuations.length; i++) await held.continuations[i]
  if (failure) throw failure.err
}

/** What the caller already read of a batch, so that its first round does not read it again. */
export interface FirstRound {
  /** The runs as their claim read them a moment ago: their statuses are taken as read. */
  fresh?: boolean
  /**
   * Runs' next steps as their claim read them (null: none left). A run not
   * in it has its step read by the round as usual.
   */
  nextSteps?: ReadonlyMap<number, StepRow | null>
  /** When the claims run out at the earliest (runner's clock, ms), when the caller knows it. */
  leaseEnds?: number
}

/** What a batch and its stragglers share. */
interface Held {
  tell: OnAnswer
  answered: Set<number>
  continuations: Promise<void>[]
  /** Runs whose step went on past its round. */
  straggling: Set<number>
}

/**
 * The rounds of one batch. `knownLeaseEnds`: when the claims run out at the
 * earliest (runner's clock, ms); by default two thirds of a lease from now,
 * since the runner renews claims older than a third of the lease before it
 * gets here.
 */
async function rounds(
  deps: EngineDeps,
  claimed: readonly ClaimedRun[],
  held: Held,
  knownLeaseEnds: number | undefined,
  first: FirstRound = {},
): Promise<void> {
  const onAnswer = held.tell
  const { db, registry } = deps
  const byId = new Map(claimed.map((r) => [r.id, r]))
  let active = claimed.map((r) => r.id)
  const budget = deps.maxStepsPerClaim ?? 25
  let leaseEnds = knownLeaseEnds ?? deps.clock.now().getTime() + (deps.leaseMs * 2) / 3
  const writer = new BufferedWriter(db, deps.hardStop)

  for (let round = 0; round < budget && active.length > 0; round++) {
    if (deps.stopping()) break
    // Let go once the round's writes that concern them are made.
    const leaving: [ClaimedRun, RunAnswer][] = []
    // `fresh`: the runs as their claim read them a moment ago (a woken batch,
    // wakeLane.ts), so the first round does not read their statuses again.
    const snapshots =
      round === 0 && first.fresh === true
        ? active.map((id) => snapshotOf(byId.get(id) as ClaimedRun))
        : await runs.statusesOf(db, active)
    const live = new Map(snapshots.filter((s) => isAdvancing(s.status)).map((s) => [s.id, s]))
    for (const id of active) if (!live.has(id)) leaving.push([byId.get(id) as ClaimedRun, { stop: true }])
    const next = await nextStepsOf(db, [...live.keys()], round === 0 ? first.nextSteps : undefined)
    const now = deps.clock.now()
    let entries: Entry[] = []
    for (const [id, snap] of live) {
      const run: ClaimedRun = {
        ...(byId.get(id) as ClaimedRun),
        status: snap.status,
        currentPhase: snap.currentPhase,
        health: snap.health,
      }
      byId.set(id, run)
      const step = next.get(id)
      if (!step) {
        await writer.finishRun(id)
        leaving.push([run, { stop: true }])
        continue
      }
      const wait = notYet(step, now)
      const how = wait ? null : entryOf(step)
      if (how === null) {
        // Not due: back to sleep until its time, or (a cue parked with no
        // timeout, `wakeAt` null) until its person acts, as when it parked.
        // Only a step the runner cannot enter is looked at again in a second.
        leaving.push([run, { wakeAt: wait ? wait.wakeAt : new Date(now.getTime() + 1000) }])
        continue
      }
      const move = phaseMove(step, snap.status, snap.currentPhase)
      if (move) await writer.movePhase(id, move)
      entries.push({ run, step, executing: executingRow(step, how, now), status: snap.status, how })
    }
    // Runs finished and phases moved, before any step of the round begins:
    // news to the live feeds as a step's outcome is (a run's completion is
    // written here, after its last step's outcome was told).
    if (await writer.flush()) deps.observer?.runsMoved?.()
    for (const [run, answer] of leaving) onAnswer(run, answer)
    if (entries.length === 0) return

    // The run's lease (and the step's) must outlive the step, or another
    // instance would take it mid-step: renewed set-wise when the round's
    // longest timeout reaches past what is left of it (roundLease.ts says
    // why with a third of a lease to spare). Every step's timeout counts, an
    // inline kind's too: rounds after this one lean on the length. Skipped
    // for inline steps, a claim kept its own LEASE_MS and, under load, lapsed
    // mid-batch: a step ran twice (the multi-process drill).
    const needed = Math.max(...entries.map((e) => stepNeedMs(e.step.timeoutMs)))
    const leaseUntil = new Date(now.getTime() + Math.max(deps.leaseMs, needed))
    if (mustRenew(now.getTime(), leaseEnds, needed, deps.leaseMs)) {
      const ids = entries.map((e) => e.run.id)
      const renewTo = new Date(now.getTime() + roundLeaseMs(deps.leaseMs, needed))
      const renewed = await runs.renewClaims(db, ids, deps.owner, renewTo, now)
      // Lost (its lease ran out and another instance took it): not ours to advance.
      for (const e of entries) if (!renewed.has(e.run.id)) onAnswer(e.run, { stop: true })
      entries = entries.filter((e) => renewed.has(e.run.id))
      leaseEnds = renewTo.getTime()
    }
    entries = await enter(deps, entries, leaseUntil, now, onAnswer)

    // Outcomes and log lines are written as they come, set-wise.
    const recording = new Recording(deps, held.tell)
    // A step's lines are written while it runs: with the round's writes while
    // the round lasts, at once by a straggler.
    let roundOpen = true
    const lines: Pick<StepWriter, 'log'> = {
      async log(line) {
        if (roundOpen) recording.writer.add((w) => void w.log(line))
        else await logs.append(db, line)
      },
    }
    const outcomes = await executeRound(
      entries.map((e) => ({
        unlimited: registry.get(e.step.kind)?.inline === true,
        run: () => attempt(deps, { run: e.run, step: e.executing, resumed: e.how === 'resume', lines }),
      })),
      deps.stepConcurrency ?? DEFAULT_STEP_CONCURRENCY,
      {
        slots: deps.stepSlots,
        onSettled: (i, done) =>
          recording.record(entries[i] as Entry, resultOf(deps, entries[i] as Entry, done)),
      },
    )
    roundOpen = false
    const roundLeaseEnds = leaseEnds
    for (const [i, pending] of outcomes.pending) {
      const e = entries[i] as Entry
      held.straggling.add(e.run.id)
      held.continuations.push(straggler(deps, e, pending, held, roundLeaseEnds))
    }
    // Every outcome of the round is written before any run of it takes its next step.
    await recording.settled()
    for (const [run, answer] of recording.leaving) onAnswer(run, answer)
    active = recording.next.map((r) => r.id)
  }
  // Stopping, or the step budget spent: due now, so other runs get a turn first.
  const now = deps.clock.now()
  for (const id of active) onAnswer(byId.get(id) as ClaimedRun, { wakeAt: now })
}

/**
 * Begin (or resume) the round's steps set-wise; answers the entries this
 * instance now executes. A step that slept and resumes with no lease
 * (`resumesWithoutLease`: a due `core.wait`) is entered with no statement.
 * A run whose step was not entered (a person skipped it meanwhile, another
 * owner holds it) is let go, due again in a second.
 */
async function enter(
  deps: EngineDeps,
  entries: Entry[],
  leaseUntil: Date,
  now: Date,
  onAnswer: OnAnswer,
): Promise<Entry[]> {
  const { db } = deps
  const toBegin = entries.filter((e) => e.how === 'begin').map((e) => e.step.id)
  const leaseless = new Set(
    entries
      .filter((e) => e.how === 'resume' && resumesWithoutLease(e.step, deps.registry.get(e.step.kind)))
      .map((e) => e.step.id),
  )
  const toResume = entries
    .filter((e) => e.how === 'resume' && !leaseless.has(e.step.id))
    .map((e) => e.step.id)
  let entered: number
  try {
    entered =
      leaseless.size +
      (await steps.beginMany(db, toBegin, deps.owner, leaseUntil, now)) +
      (await steps.resumeMany(db, toResume, deps.owner, leaseUntil, now))
  } catch (err) {
    // A database that went away mid-reply may have committed the begin and
    // lost only its answer. Nothing ran yet, so once it answers again the
    // steps are put back as they were (no lease, no attempt counted).
    if (isDbUnavailable(err)) await recordOutcome(deps.hardStop, () => takeBack(deps, entries))
    throw err
  }
  if (entered === entries.length) return entries
  const mine = new Set(
    (
      await steps.getByIds(
        db,
        entries.map((e) => e.step.id),
      )
    )
      .filter((s) => s.status === 'running' && (s.claimedBy === deps.owner || leaseless.has(s.id)))
      .map((s) => s.id),
  )
  const again = new Date(now.getTime() + 1000)
  for (const e of entries) if (!mine.has(e.step.id)) onAnswer(e.run, { wakeAt: again })
  return entries.filter((e) => mine.has(e.step.id))
}

/**
 * A step that outlasted its round: its outcome is written when it answers,
 * then its run goes on as a batch of one. Never rejects: what fails is its
 * run's error alone.
 */
async function straggler(
  deps: EngineDeps,
  e: Entry,
  pending: Promise<Settled<AttemptResult>>,
  held: Held,
  leaseEnds: number,
): Promise<void> {
  try {
    const recording = new Recording(deps, held.tell)
    recording.record(e, resultOf(deps, e, await pending))
    await recording.settled()
    for (const [run, answer] of recording.leaving) held.tell(run, answer)
    if (recording.next.length > 0) await rounds(deps, recording.next, held, leaseEnds)
  } catch (error) {
    if (!held.answered.has(e.run.id)) held.tell(e.run, { error })
  }
}

/** Put back the steps of a round whose begin (or resume) may have committed unanswered. */
async function takeBack(deps: EngineDeps, entries: readonly Entry[]): Promise<void> {
  // Steps as a materialised program left them go back set-wise; any other begun step row by row.
  const pristine = (st: StepRow) =>
    st.status === 'pending' && st.attempts === 0 && !st.lastError && !st.wakeAt && !st.startedAt
  const begun = entries.filter((e) => e.how === 'begin')
  await steps.takeBackEntered(
    deps.db,
    begun.filter((e) => pristine(e.step)).map((e) => e.step.id),
    entries.filter((e) => e.how === 'resume').map((e) => e.step.id),
    deps.owner,
  )
  for (const e of begun) if (!pristine(e.step)) await steps.takeBackBegin(deps.db, e.step, deps.owner)
}

/** The step as it is while this attempt executes (what its handler and its outcome's writes see). */
function executingRow(step: StepRow, how: 'begin' | 'resume', now: Date): StepRow {
  if (how === 'resume') return step
  // As beginMany wrote it: a first start is stamped with the round's `now`, so
  // a `core.wait {seconds}` counts from the same instant for the whole batch.
  return { ...step, status: 'running', attempts: step.attempts + 1, startedAt: step.startedAt ?? now }
}

/** The next step of each of `ids`: as the claim read it where it did, the rest read now in one statement. */
async function nextStepsOf(
  db: EngineDeps['db'],
  ids: readonly number[],
  known: ReadonlyMap<number, StepRow | null> | undefined,
): Promise<Map<number, StepRow>> {
  const unread = known ? ids.filter((id) => !known.has(id)) : ids
  const next = unread.length > 0 ? await steps.nextSteps(db, unread) : new Map<number, StepRow>()
  if (known)
    for (const id of ids) {
      const step = known.get(id)
      if (step) next.set(id, step)
    }
  return next
}

/** A claimed run's status as its claim read it. */
function snapshotOf(
  run: ClaimedRun,
): Pick<runs.RunStatusSnapshot, 'id' | 'status' | 'health' | 'currentPhase'> {
  return { id: run.id, status: run.status, health: run.health, currentPhase: run.currentPhase }
}
