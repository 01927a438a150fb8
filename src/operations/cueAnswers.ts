/**
 * Answering a cue (resolve or skip) so that answers cannot race: the cue's
 * ladder row is locked, then the step moves by its guard, then the answer is
 * written on the ladder and CUE_ANSWERED into the outbox, all in one
 * transaction. Of two answers exactly one applies; the other reads the
 * winner's answer back (`applied: false`, `step.cue.answer`). An answer after
 * the deadline, or from outside an exclusive cue's assignees, does not apply.
 */
import * as audit from '../../sql/auditLog.ts'
import type { CueVia, LadderRow } from '../../sql/cueLadders.ts'
import * as ladders from '../../sql/cueLadders.ts'
import type { Queryable, Statement, Transaction } from '../../sql/db.ts'
import * as logs from '../../sql/eventRunLogs.ts'
import type { AnswerClaim } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as events from '../../sql/notifications/events.ts'
import type { Person } from '../api/person.ts'
import { identitiesOf } from '../api/person.ts'
import { AppError, badInput, ERROR_CODES, notFound } from '../errors.ts'
import { cueEvent } from '../runner/cueLadder.ts'
import { type ControlDeps, type StepAnswer, skipStep } from './runControls.ts'

export interface CueAnswerInput {
  stepId: number
  person: Person
  outcome: 'resolved' | 'skipped'
  via: CueVia
  /** The note (resolve) or reason (skip). */
  text: string | null
  /**
   * What `by` records when it is not the person's name (an answer link: the
   * channel's name); the log and audit still say who.
   */
  by?: string
}

/** True when `person` may answer `ladder`: anyone who may operate, unless the cue is exclusive. */
export function mayAnswer(person: Person, ladder: Pick<LadderRow, 'exclusive' | 'assignees'>): boolean {
  if (!ladder.exclusive || person.admin || ladder.assignees.length === 0) return true
  return identitiesOf(person).some((id) => ladder.assignees.includes(id))
}

/** An answer that applied; `handedOver`: its run claimed for this process's runner, to be passed on after the commit. */
type Decision =
  | { applied: true; handedOver?: HandedOver }
  | { applied: false; why: string; forbidden?: string[] }

interface HandedOver {
  claim: AnswerClaim
  run: runs.RunWithDefinition
  next: StepRow | null
}

/**
 * One connection from the pool for the whole answer, taken once: a full
 * queue can refuse the answer (BUSY) only before anything of it is applied,
 * never after, and a busy pool is waited for once instead of at each
 * statement. Four round trips: the BEGIN, the step and its run read and
 * the ladder row locked (the exclusivity check reads it too); the move; the
 * answer's record, its log line and the run's wake-up (or, with a runner in
 * this process, its claim for that runner: src/runner/handOff.ts) with the
 * COMMIT. After the commit, on the same connection: the run is handed over
 * or the runner nudged first, then the reply's step is read and the audit
 * entry written, so neither delays the GO. Each round trip holds one of the
 * API pool's connections: fewer of them, a shorter wait for the next answer.
 */
export async function answerCue(deps: ControlDeps, input: CueAnswerInput): Promise<StepAnswer> {
  const { stepId, person, outcome, via, text } = input
  if (text !== null && text.length > 1000) throw badInput('note and reason must be at most 1000 characters.')
  const action = outcome === 'resolved' ? 'resolve cue' : 'skip step'
  const by = input.by ?? person.name
  const who = by === person.name ? person.name : `${person.name} (${by})`
  // The step's id, as the API names it (stepId), and its position in the run for a reader.
  const answerLine = (before: StepRow, d: Decision): logs.NewLog => ({
    runId: before.runId,
    stepId,
    level: d.applied ? 'info' : 'warn',
    message: d.applied
      ? `${action} ${stepId} (step ${before.seq + 1} of the run, ${before.kind}) by ${who} via ${via}${text ? `: ${text}` : ''}`
      : `${action} ${stepId} (step ${before.seq + 1} of the run) by ${who} via ${via} not applied: ${d.why}`,
    actor: person.name,
    data: { action, applied: d.applied, text, via, by },
  })
  const answered = await deps.db.transactionThen(
    async (tx): Promise<{ before: StepRow; decision: Decision }> => {
      // The step and its run read, then the ladder row locked (the
      // exclusivity check reads it too), in one text with the BEGIN.
      const [read, locked] = await tx.batch([
        runs.getStepWithRunStatement(stepId),
        ladders.getForUpdateStatement(stepId),
      ])
      const found = runs.stepWithRunOf(read?.rows ?? [])
      if (!found) throw notFound('step', stepId)
      const { step: before, run, next } = found
      const decision = await moveCue(tx, deps, input, {
        before,
        run,
        next,
        ladder: ladders.ladderOf(locked?.rows ?? []),
        by,
        appliedLine: answerLine(before, { applied: true }),
      })
      return { before, decision }
    },
    async (conn, { before, decision }) => {
      if (decision.applied && decision.handedOver) {
        const { run, next, claim } = decision.handedOver
        deps.handOff?.adopt(run, next, claim)
      } else if (decision.applied) deps.nudge?.()
      if (!decision.applied && decision.forbidden) {
        await refuse(conn, before, person, action, via)
        return { decision, step: before }
      }
      // The reply's step read and the audit entry (and a refused answer's
      // line before them) in one round trip.
      const [reread] = await conn.batch([
        steps.getByIdStatement(stepId),
        ...(decision.applied ? [] : [logs.appendStatement(answerLine(before, decision))]),
        audit.recordStatement({
          actor: person.name,
          action: outcome === 'resolved' ? 'cue.resolve' : 'cue.skip',
          targetType: 'step',
          targetId: String(stepId),
          outcome: decision.applied ? 'ok' : 'refused',
          detail: {
            runId: before.runId,
            via,
            by,
            note: text,
            ...(decision.applied ? {} : { why: decision.why }),
          },
        }),
      ])
      return { decision, step: steps.stepOf(reread?.rows ?? []) ?? before }
    },
    { retryable: true },
  )
  const { decision } = answered
  if (!decision.applied && decision.forbidden)
    throw new AppError(
      ERROR_CODES.FORBIDDEN,
      `This cue is exclusive to ${decision.forbidden.join(', ')}; ${person.name} may not answer it (an admin may).`,
    )
  return { applied: decision.applied, step: answered.step }
}

/**
 * In the answer's transaction, its ladder row locked: (when the
 * answer may apply) the step moved by its guard, the answer recorded with
 * CUE_ANSWERED, its log line written and the run woken; or why it does not apply.
 */
async function moveCue(
  tx: Transaction,
  deps: ControlDeps,
  input: CueAnswerInput,
  at: {
    before: StepRow
    run: runs.RunWithDefinition
    next: StepRow | null
    /** The cue's ladder row, locked by this transaction; null for a cue without one. */
    ladder: LadderRow | null
    by: string
    appliedLine: logs.NewLog
  },
): Promise<Decision> {
  const { stepId, person, outcome, via, text } = input
  const { before, run, by, ladder } = at
  if (ladder && !mayAnswer(person, ladder))
    return { applied: false, why: 'the cue is exclusive to its assignees', forbidden: ladder.assignees }
  if (ladder?.answer) return { applied: false, why: `already answered by ${ladder.answer.by}` }
  const now = deps.clock.now()
  if (ladder?.deadlineAt && ladder.deadlineAt.getTime() <= now.getTime())
    return { applied: false, why: 'its deadline has passed' }
  // A cue with a ladder may be answered while the runner re-enters it at a rung.
  const resolve = ladder ? steps.resolveCue : steps.resolveParked
  const moved =
    outcome === 'resolved'
      ? await resolve(tx, stepId, { resolvedBy: by, note: text })
      : await steps.skip(tx, stepId, text)
  if (!moved) return { applied: false, why: 'the step is no longer waiting' }
  // The rest of the answer goes with the COMMIT, in one round trip: between
  // the step's move and the next step's start, every round trip is one more
  // wait on a loaded database and event loop. With it: the answer's record
  // and CUE_ANSWERED, its log line (written before the runner can write the
  // next step's: the runner is told at the commit) and the run's claim for
  // this process's runner, or else its wake.
  const tail: Statement[] = []
  if (ladder) {
    const answer = { outcome, by, via, at: now, note: text }
    tail.push(ladders.recordAnswerStatement(stepId, answer))
    tail.push(...events.emitStatements(cueEvent('CUE_ANSWERED', run, { ...ladder, answer }, 'answered', now)))
  }
  tail.push(logs.appendStatement(at.appliedLine))
  const claim = deps.handOff?.claim() ?? null
  const claimRun = claim ? runs.claimAnsweredStatement(run.id, run.status, claim) : null
  // Where the claim's answer will be in the batch; -1: no claim sent.
  const claimAt = claimRun ? tail.push(claimRun) - 1 : -1
  // The runner compares wake_at with its clock, so wake by that clock, not the
  // database's; a run the claim above took is not woken (the claim is its wake).
  tail.push(runs.wakeNowStatement(before.runId, deps.clock.now(), claimRun ? claim?.token : undefined))
  const answers = await tx.commitWith(tail)
  if (claim && claimAt >= 0 && answers[claimAt]?.affectedRows === 1) {
    const claimed = { ...run, claimedBy: claim.owner, claimToken: claim.token, wakeAt: claim.leaseUntil }
    return { applied: true, handedOver: { claim, run: claimed, next: at.next } }
  }
  return { applied: true }
}

/** An outsider's answer to an exclusive cue: its line and its audit entry, in one round trip. */
async function refuse(
  db: Queryable,
  step: StepRow,
  person: Person,
  action: string,
  via: CueVia,
): Promise<void> {
  await db.batch([
    logs.appendStatement({
      runId: step.runId,
      stepId: step.id,
      level: 'warn',
      message: `${action} ${step.id} (step ${step.seq + 1} of the run) by ${person.name} via ${via} refused: the cue is exclusive to its assignees`,
      actor: person.name,
      data: { action, applied: false, via, forbidden: true },
    }),
    audit.recordStatement({
      actor: person.name,
      action: action === 'resolve cue' ? 'cue.resolve' : 'cue.skip',
      targetType: 'step',
      targetId: String(step.id),
      outcome: 'refused',
      detail: { runId: step.runId, via, why: 'exclusive' },
    }),
  ])
}

/** `resolveCue`: a parked cue answered `resolved`. */
export function resolveCueAs(
  deps: ControlDeps,
  stepId: number,
  person: Person,
  note: string | null,
  via: CueVia,
): Promise<StepAnswer> {
  return answerCue(deps, { stepId, person, outcome: 'resolved', via, text: note })
}

/** `skipStep`: a cue is answered `skipped`; any other step is skipped as before. */
export async function skipStepAs(
  deps: ControlDeps,
  stepId: number,
  person: Person,
  reason: string | null,
  via: CueVia,
): Promise<StepAnswer> {
  const step = await steps.getById(deps.db, stepId)
  if (step && step.kind !== 'core.cue') return skipStep(deps, stepId, person.name, reason)
  return answerCue(deps, { stepId, person, outcome: 'skipped', via, text: reason })
}
