/**
 * The figures of bench/showtime.ts from what the database stamped and what the
 * clients saw, one phase (idle or loaded) at a time, and the targets they are
 * held to. Kept apart from the driver so each file stays readable.
 */
import type { Db } from '../sql/db.ts'
import { maxOf, percentile } from './lib.ts'
import type { AnswerSample, ClientsReport, HealthSample } from './showtimeClients.ts'

/** The show's steps, by position: log, webhook, cue, wait 2 s, cue, webhook, ending log. */
export const SEQ = { firstCue: 2, wait: 3, secondCue: 4 } as const
export const WAIT_MS = 2000
export const RECEIVER_MS = 15

export interface StepRow {
  id: number
  run_id: number
  seq: number
  status: string
  started_at: Date | null
  ended_at: Date | null
  run_status: string
  run_ended: Date | null
}

/** Every step of the runs of definitions [fromDef, toDef]. */
export function phaseSteps(db: Db, fromDef: number, toDef: number): Promise<StepRow[]> {
  return db.query<StepRow>(
    `SELECT s.id, s.run_id, s.seq, s.status, s.started_at, s.ended_at,
            r.status AS run_status, r.ended_at AS run_ended
       FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id
      WHERE r.definition_id BETWEEN ? AND ?
      ORDER BY s.run_id, s.seq`,
    [fromDef, toDef],
  )
}

export interface Spread {
  n: number
  p50: number
  p99: number
  max: number
}

export function spread(values: readonly number[]): Spread {
  const finite = values.filter(Number.isFinite)
  return {
    n: finite.length,
    p50: Math.round(percentile(finite, 50)),
    p99: Math.round(percentile(finite, 99)),
    max: Math.round(maxOf(finite)),
  }
}

export interface PhaseFigures {
  shows: number
  completed: number
  /** GO (the cue step's ended_at) → the next step's started_at. */
  goToNextMs: Spread
  /** The 2 s wait's ended_at − (started_at + 2 s). */
  waitOvershootMs: Spread
  /** The cue's started_at (parked) → the first inbox that carried it to its owner. */
  parkedToOwnerMs: Spread
  /** … → the first inbox that carried it to any operator. */
  parkedToAnyMs: Spread
  cuesNeverSeenByOwner: number
  resolveCueMs: Spread
  resolveCueErrors: number
  /**
   * The deliberate second answers (sent after the owner's was applied), how
   * many of them wrongly said `applied: true`, and how many were refused
   * (BUSY, then sent again) or lost at the socket: neither of those applied.
   */
  secondAnswers: number
  secondAnswersApplied: number
  secondAnswersRefused: number
  /** Cues an answer applied to more than once (must be 0). */
  answeredTwice: number
  healthzMs: Spread
  healthzFailed: number
  dashboardDeliveries: number
  dashboardDelayMs: Spread
  /** The instant → the last run's ended_at. */
  lastCompletedMs: number
}

const t = (d: Date | null) => (d ? d.getTime() : Number.NaN)

export function phaseFigures(
  steps: readonly StepRow[],
  clients: ClientsReport,
  window: { from: number; to: number },
): PhaseFigures {
  const byRun = new Map<number, StepRow[]>()
  for (const s of steps) {
    const list = byRun.get(s.run_id) ?? []
    list[s.seq] = s
    byRun.set(s.run_id, list)
  }
  const go: number[] = []
  const overshoot: number[] = []
  const cueParkedAt = new Map<string, number>()
  let completed = 0
  let lastEnded = Number.NaN
  for (const list of byRun.values()) {
    const first = list[0]
    if (first?.run_status === 'completed') completed++
    lastEnded = Math.max(Number.isNaN(lastEnded) ? 0 : lastEnded, t(first?.run_ended ?? null))
    for (const seq of [SEQ.firstCue, SEQ.secondCue]) {
      const cue = list[seq]
      const next = list[seq + 1]
      if (cue && next) go.push(t(next.started_at) - t(cue.ended_at))
      if (cue?.started_at) cueParkedAt.set(String(cue.id), t(cue.started_at))
    }
    const wait = list[SEQ.wait]
    if (wait) overshoot.push(t(wait.ended_at) - (t(wait.started_at) + WAIT_MS))
  }
  const toOwner: number[] = []
  const toAny: number[] = []
  const seen = new Map(clients.sightings.map((s) => [s.stepId, s]))
  let neverSeen = 0
  for (const [id, parkedAt] of cueParkedAt) {
    const s = seen.get(id)
    if (!s?.firstOwnerAt) neverSeen++
    else toOwner.push(s.firstOwnerAt - parkedAt)
    if (s) toAny.push(s.firstAnyAt - parkedAt)
  }
  const mine = clients.answers.filter((a) => cueParkedAt.has(a.stepId))
  const firsts = mine.filter((a) => !a.second)
  const seconds = mine.filter((a) => a.second)
  const appliedPerCue = new Map<string, number>()
  for (const a of mine)
    if (a.applied === true) appliedPerCue.set(a.stepId, (appliedPerCue.get(a.stepId) ?? 0) + 1)
  const inWindow = <T extends { at: number }>(xs: readonly T[]) =>
    xs.filter((x) => x.at >= window.from && x.at <= window.to)
  const health: HealthSample[] = inWindow(clients.health)
  const deliveries = inWindow(clients.dashboardDeliveries)
  return {
    shows: byRun.size,
    completed,
    goToNextMs: spread(go),
    waitOvershootMs: spread(overshoot),
    parkedToOwnerMs: spread(toOwner),
    parkedToAnyMs: spread(toAny),
    cuesNeverSeenByOwner: neverSeen,
    resolveCueMs: spread(firsts.map((a: AnswerSample) => a.ms)),
    resolveCueErrors: firsts.filter((a) => a.error !== null).length,
    secondAnswers: seconds.length,
    secondAnswersApplied: seconds.filter((a) => a.applied === true).length,
    secondAnswersRefused: seconds.filter((a) => a.applied !== true && a.applied !== false).length,
    answeredTwice: [...appliedPerCue.values()].filter((n) => n > 1).length,
    healthzMs: spread(health.map((h) => h.ms)),
    healthzFailed: health.filter((h) => !h.ok).length,
    dashboardDeliveries: deliveries.length,
    dashboardDelayMs: spread(deliveries.map((d) => d.delayMs)),
    lastCompletedMs: lastEnded - window.from,
  }
}

export interface TargetRow {
  figure: string
  idle: number | string
  loaded: number | string
  ratio: number | string
  target: string
  met: boolean | '—'
}

export function targetRow(
  figure: string,
  idle: number,
  loaded: number,
  limit: number | null,
  target?: string,
): TargetRow {
  const ratio = Number.isFinite(idle) && idle > 0 ? Math.round((loaded / idle) * 10) / 10 : '—'
  return {
    figure,
    idle: Number.isFinite(idle) ? idle : '—',
    loaded: Number.isFinite(loaded) ? loaded : '—',
    ratio,
    target: target ?? (limit === null ? 'reported' : `<= ${limit}`),
    met: limit === null ? '—' : Number.isFinite(loaded) && loaded <= limit,
  }
}
