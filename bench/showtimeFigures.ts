/**
 * The figures of bench/showtime.ts from what the database stamped and what the
 * clients saw, one phase (idle or loaded) at a time, and the targets they are
 * held to. Kept apart from the driver so each file stays readable.
 */
import type { Db } from '../sql/db.ts'
import { maxOf, percentile } from './lib.ts'
import type { AnswerSample, ClientsReport, HealthSample } from './showtimeMessages.ts'

/** The show's steps, by position: log, webhook, cue, wait 2 s, cue, webhook, ending log. */
export const SEQ = { firstCue: 2, wait: 3, secondCue: 4 } as const
export const WAIT_MS = 2000
/** How long the show's webhook receiver takes to answer (SHOWTIME_RECEIVER_MS, default 15). */
export const RECEIVER_MS = Number(process.env.SHOWTIME_RECEIVER_MS ?? 15)

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

/**
 * When each cue of the shows of `fromDef..toDef` was parked, by the database's
 * clock: the runner's "waiting on a person" line, written with the park. It
 * splits "cue parked → its owner" (from the step's start) into the runner's
 * part (start → park) and the inbox's (park → the owner's client).
 */
export async function phaseParkTimes(db: Db, fromDef: number, toDef: number): Promise<Map<string, number>> {
  const rows = await db.query<{ step_id: number; at: Date }>(
    `SELECT l.step_id, MIN(l.at) AS at
       FROM event_run_logs l JOIN event_runs r ON r.id = l.run_id
      WHERE r.definition_id BETWEEN ? AND ? AND l.step_id IS NOT NULL AND l.message LIKE 'waiting on a person%'
      GROUP BY l.step_id`,
    [fromDef, toDef],
  )
  return new Map(rows.map((r) => [String(r.step_id), r.at.getTime()]))
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
  /** The cue step's start → its park's log line (the runner's part of "cue parked → its owner"). */
  startToParkMs: Spread
  /** The park's log line → the owner's client (the inbox's part). */
  parkToOwnerMs: Spread
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
  /**
   * Per run, the time its two cues waited on the person: for each cue, from
   * the first delivery to its owner's inbox to the owner's first send of the
   * answer (the operator's own queue of answers included; a BUSY refusal and
   * its resend are the server's time, so not in it).
   */
  answeringMs: Spread
  /** Per run, its ended_at − the instant − its answering time: what the system took. */
  beyondAnsweringMs: Spread
  /** Runs whose answering time is unknown (a cue never seen by its owner, or never answered). */
  runsWithoutAnsweringTime: number
  /**
   * Where the time beyond answering goes, beside the cue → owner, GO and wait
   * figures: the instant → the run's first cue step started (the start, the
   * first log and webhook), an answer's send → its cue step ended (resolveCue
   * up to its commit), and the second cue ended → the run ended (GO, the last
   * webhook and log).
   */
  instantToFirstCueMs: Spread
  answerSentToCueEndedMs: Spread
  lastCueToRunEndMs: Spread
}

const t = (d: Date | null) => (d ? d.getTime() : Number.NaN)

export function phaseFigures(
  steps: readonly StepRow[],
  clients: ClientsReport,
  window: { from: number; to: number },
  parkTimes: ReadonlyMap<string, number> = new Map(),
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
  const runCues: { ended: number; cues: string[] }[] = []
  const cueEndedAt = new Map<string, number>()
  const instantToFirstCue: number[] = []
  const lastCueToRunEnd: number[] = []
  let completed = 0
  let lastEnded = Number.NaN
  for (const list of byRun.values()) {
    const first = list[0]
    if (first?.run_status === 'completed') completed++
    lastEnded = Math.max(Number.isNaN(lastEnded) ? 0 : lastEnded, t(first?.run_ended ?? null))
    const cues: string[] = []
    for (const seq of [SEQ.firstCue, SEQ.secondCue]) {
      const cue = list[seq]
      const next = list[seq + 1]
      if (cue && next) go.push(t(next.started_at) - t(cue.ended_at))
      if (cue?.started_at) cueParkedAt.set(String(cue.id), t(cue.started_at))
      if (cue) cues.push(String(cue.id))
      if (cue?.ended_at) cueEndedAt.set(String(cue.id), t(cue.ended_at))
    }
    instantToFirstCue.push(t(list[SEQ.firstCue]?.started_at ?? null) - window.from)
    lastCueToRunEnd.push(t(first?.run_ended ?? null) - t(list[SEQ.secondCue]?.ended_at ?? null))
    runCues.push({ ended: t(first?.run_ended ?? null), cues })
    const wait = list[SEQ.wait]
    if (wait) overshoot.push(t(wait.ended_at) - (t(wait.started_at) + WAIT_MS))
  }
  const toOwner: number[] = []
  const toAny: number[] = []
  const seen = new Map(clients.sightings.map((s) => [s.stepId, s]))
  const startToPark: number[] = []
  const parkToOwner: number[] = []
  let neverSeen = 0
  for (const [id, parkedAt] of cueParkedAt) {
    const s = seen.get(id)
    if (!s?.firstOwnerAt) neverSeen++
    else toOwner.push(s.firstOwnerAt - parkedAt)
    if (s) toAny.push(s.firstAnyAt - parkedAt)
    const parkLogged = parkTimes.get(id)
    if (parkLogged === undefined) continue
    startToPark.push(parkLogged - parkedAt)
    if (s?.firstOwnerAt) parkToOwner.push(s.firstOwnerAt - parkLogged)
  }
  const mine = clients.answers.filter((a) => cueParkedAt.has(a.stepId))
  const firsts = mine.filter((a) => !a.second)
  const seconds = mine.filter((a) => a.second)
  const appliedPerCue = new Map<string, number>()
  for (const a of mine)
    if (a.applied === true) appliedPerCue.set(a.stepId, (appliedPerCue.get(a.stepId) ?? 0) + 1)
  // The owner's first send of each cue's answer (a resend after BUSY is not the person's time).
  const firstSent = new Map<string, number>()
  for (const a of firsts) firstSent.set(a.stepId, Math.min(firstSent.get(a.stepId) ?? a.sentAt, a.sentAt))
  const answering: number[] = []
  const beyond: number[] = []
  for (const r of runCues) {
    const waits = r.cues.map(
      (id) => (firstSent.get(id) ?? Number.NaN) - (seen.get(id)?.firstOwnerAt ?? Number.NaN),
    )
    const total = waits.length === 2 ? waits.reduce((x, y) => x + y, 0) : Number.NaN
    answering.push(total)
    beyond.push(r.ended - window.from - total)
  }
  const answerSentToCueEnded = [...firstSent].map(([id, sent]) => (cueEndedAt.get(id) ?? Number.NaN) - sent)
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
    startToParkMs: spread(startToPark),
    parkToOwnerMs: spread(parkToOwner),
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
    answeringMs: spread(answering),
    beyondAnsweringMs: spread(beyond),
    runsWithoutAnsweringTime: beyond.filter((x) => !Number.isFinite(x)).length,
    instantToFirstCueMs: spread(instantToFirstCue),
    answerSentToCueEndedMs: spread(answerSentToCueEnded),
    lastCueToRunEndMs: spread(lastCueToRunEnd),
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

export const TARGET = { goP99: 100, overshootP99: 100, deliveredP99: 250, healthP99: 50, eldP99: 50 } as const
/** The show's own length: the 2 s wait and the two webhooks' answers; the cues are the person's. */
export const PROGRAM_MS = WAIT_MS + 2 * RECEIVER_MS
/** Each run's time beyond its answering is held to 1.1 × the program's own length. */
export const BEYOND_ANSWERING_LIMIT_MS = Math.round(1.1 * PROGRAM_MS)

/** A figure of a phase, its limit (null: reported) and how the limit reads. */
export interface ShowFigure {
  figure: string
  of: (f: PhaseFigures) => number
  limit: number | null
  target?: string
}

/** What a step waits for: GO, the timer, the cue reaching its owner. */
export const TIMING_FIGURES: readonly ShowFigure[] = [
  { figure: 'GO → next step p50 (ms)', of: (f) => f.goToNextMs.p50, limit: null },
  { figure: 'GO → next step p99 (ms)', of: (f) => f.goToNextMs.p99, limit: TARGET.goP99 },
  { figure: '2 s wait overshoot p50 (ms)', of: (f) => f.waitOvershootMs.p50, limit: null },
  { figure: '2 s wait overshoot p99 (ms)', of: (f) => f.waitOvershootMs.p99, limit: TARGET.overshootP99 },
  { figure: '2 s wait overshoot max (ms)', of: (f) => f.waitOvershootMs.max, limit: null },
  { figure: 'cue parked → its owner p50 (ms)', of: (f) => f.parkedToOwnerMs.p50, limit: null },
  {
    figure: 'cue parked → its owner p99 (ms)',
    of: (f) => f.parkedToOwnerMs.p99,
    limit: TARGET.deliveredP99,
  },
  { figure: 'cue parked → any operator p99 (ms)', of: (f) => f.parkedToAnyMs.p99, limit: null },
  { figure: '  of which: cue step start → park p50 (ms)', of: (f) => f.startToParkMs.p50, limit: null },
  { figure: '  of which: cue step start → park p99 (ms)', of: (f) => f.startToParkMs.p99, limit: null },
  { figure: '  of which: park → its owner p50 (ms)', of: (f) => f.parkToOwnerMs.p50, limit: null },
  { figure: '  of which: park → its owner p99 (ms)', of: (f) => f.parkToOwnerMs.p99, limit: null },
]

/** What the API's clients wait for. */
export const SERVING_FIGURES: readonly ShowFigure[] = [
  { figure: '/healthz p99 (ms)', of: (f) => f.healthzMs.p99, limit: TARGET.healthP99 },
  { figure: '/healthz max (ms)', of: (f) => f.healthzMs.max, limit: null },
  { figure: 'resolveCue p50 (ms)', of: (f) => f.resolveCueMs.p50, limit: null },
  { figure: 'resolveCue p99 (ms)', of: (f) => f.resolveCueMs.p99, limit: null },
]

/**
 * How long the show took: raw, and per run without the time its cues waited
 * on the person (docs/performance.md, "Scale-out and memory").
 */
export const COMPLETION_FIGURES: readonly ShowFigure[] = [
  { figure: 'instant → last completed (ms)', of: (f) => f.lastCompletedMs, limit: null },
  { figure: 'per run: answering time p50 (ms)', of: (f) => f.answeringMs.p50, limit: null },
  { figure: 'per run: answering time p99 (ms)', of: (f) => f.answeringMs.p99, limit: null },
  {
    figure: 'per run: end − instant − answering p99 (ms)',
    of: (f) => f.beyondAnsweringMs.p99,
    limit: BEYOND_ANSWERING_LIMIT_MS,
    target: `<= 1.1 x program ${PROGRAM_MS} = ${BEYOND_ANSWERING_LIMIT_MS}`,
  },
  {
    figure: 'per run: end − instant − answering max (ms)',
    of: (f) => f.beyondAnsweringMs.max,
    limit: BEYOND_ANSWERING_LIMIT_MS,
    target: `<= 1.1 x program ${PROGRAM_MS} = ${BEYOND_ANSWERING_LIMIT_MS}`,
  },
  {
    figure: '  of which: instant → first cue step start p50 (ms)',
    of: (f) => f.instantToFirstCueMs.p50,
    limit: null,
  },
  {
    figure: '  of which: instant → first cue step start p99 (ms)',
    of: (f) => f.instantToFirstCueMs.p99,
    limit: null,
  },
  {
    figure: '  of which: answer sent → cue ended p50 (ms)',
    of: (f) => f.answerSentToCueEndedMs.p50,
    limit: null,
  },
  {
    figure: '  of which: answer sent → cue ended p99 (ms)',
    of: (f) => f.answerSentToCueEndedMs.p99,
    limit: null,
  },
  {
    figure: '  of which: last cue ended → run ended p99 (ms)',
    of: (f) => f.lastCueToRunEndMs.p99,
    limit: null,
  },
]

export function figureRows(
  list: readonly ShowFigure[],
  idle: PhaseFigures,
  loaded: PhaseFigures,
): TargetRow[] {
  return list.map((x) => targetRow(x.figure, x.of(idle), x.of(loaded), x.limit, x.target))
}
