/**
 * The stress phases of bench/showtime.ts, on the same instance after the show:
 * the burst of answers at once, and the hostile subscriber beside per-second
 * schedules.
 */
import { loadConfig } from '../src/config.ts'
import { type BenchResult, sleep } from './lib.ts'
import { cronAt, instantAhead } from './scheduled.ts'
import type { BenchServer } from './server.ts'
import { spread } from './showtimeFigures.ts'
import type { BurstReport, HealthSample } from './showtimeMessages.ts'
import { type ClientsProcess, countRuns, createShows, PHASE_TIMEOUT_MS, until } from './showtimeSetup.ts'

const env = process.env
const BURST_ANSWERS = Number(env.SHOWTIME_BURST_ANSWERS ?? 4000)
const TICKERS = Number(env.SHOWTIME_TICKERS ?? 100)
const HOSTILE_SECONDS = Number(env.SHOWTIME_HOSTILE_SECONDS ?? 20)
const HOSTILE_SOCKETS = Number(env.SHOWTIME_HOSTILE_SOCKETS ?? 10)
const HOSTILE_PER_SOCKET = 100
const SETTLE_MS = Number(env.SHOWTIME_SETTLE_MS ?? 10_000)
const TICK_MS = loadConfig({}).tickMs

const CUE_ONLY = {
  phases: [
    { name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Go {{run.scope}}' } }] },
    { name: 'wrap-up', ending: true, steps: [{ kind: 'core.log', params: { message: 'done' } }] },
  ],
}
const EVERY_SECOND = {
  phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'tick' } }] }],
}

/** A phase asked to be left out (its count set to 0, for a quicker profile of the show alone). */
function skipped(what: string): BenchResult {
  return { value: 0, unit: `skipped (${what} = 0)`, baseline: null, ratio: null, target: '—', met: true }
}

/** Every parked cue answered twice, all at once, each on its own connection. */
export async function burstPhase(s: BenchServer, clients: ClientsProcess): Promise<BenchResult> {
  if (BURST_ANSWERS <= 0) return skipped('SHOWTIME_BURST_ANSWERS')
  const cues = Math.ceil(BURST_ANSWERS / 2)
  const instant = instantAhead(Math.max(5000, cues * 3))
  const defs = await createShows(s, {
    prefix: 'burst-',
    shows: cues,
    perDefinition: 1000,
    schedule: cronAt(instant),
    program: CUE_ONLY,
  })
  const stepIds = await until(`${cues} burst cues parked`, PHASE_TIMEOUT_MS, async () => {
    const rows = await s.app.db.query<{ id: number }>(
      `SELECT s.id FROM event_run_steps s JOIN event_runs r ON r.id = s.run_id
        WHERE r.definition_id BETWEEN ? AND ? AND s.parked = 1 AND s.status = 'running'`,
      [defs.from, defs.to],
    )
    return rows.length >= cues ? rows.map((r) => String(r.id)) : null
  })
  await sleep(1000) // the inboxes have settled
  // Each cue twice, side by side, so its two answers come from two operators.
  const offered = stepIds.flatMap((id) => [id, id])
  const r = await clients.ask<BurstReport>(
    { type: 'burst', stepIds: offered, timeoutMs: 120_000, retryRounds: 40 },
    'burstDone',
    300_000,
  )
  const first = r.first
  const busy = first.filter((a) => a.code === 'BUSY')
  const answered = first.filter((a) => a.status === 200 && typeof a.applied === 'boolean')
  const socket = first.filter((a) => a.socketError !== null)
  const busyWell = busy.filter((a) => a.status === 503 && a.retryAfter !== null)
  const other = first.filter(
    (a) =>
      a.socketError === null && a.code !== 'BUSY' && !(a.status === 200 && typeof a.applied === 'boolean'),
  )
  const all = [first, ...r.retries].flat()
  const applied = all.filter((a) => a.applied === true).length
  const resolved = await countRuns(s.app.db, defs, `AND status = 'completed'`)
  await until('the burst runs finished', 60_000, async () =>
    (await countRuns(s.app.db, defs, `AND status = 'completed'`)) >= cues ? true : null,
  ).catch(() => {})
  const completed = await countRuns(s.app.db, defs, `AND status = 'completed'`)
  const lost = offered.length - answered.length - busy.length - other.length - socket.length
  const met =
    socket.length === 0 &&
    other.length === 0 &&
    busyWell.length === busy.length &&
    applied === cues &&
    completed === cues
  const codes: Record<string, number> = {}
  for (const a of other) codes[`${a.status} ${a.code}`] = (codes[`${a.status} ${a.code}`] ?? 0) + 1
  const socketCodes: Record<string, number> = {}
  for (const a of socket) socketCodes[String(a.socketError)] = (socketCodes[String(a.socketError)] ?? 0) + 1
  console.log(
    `showtimeBurst: ${offered.length} answers at once over ${cues} cues: ${answered.length} answered, ${busy.length} BUSY ` +
      `(${busyWell.length} with 503 + Retry-After), ${other.length} other (${JSON.stringify(codes)}), ${socket.length} socket errors ` +
      `(${JSON.stringify(socketCodes)}); after up to ${r.retries.length} retries each ${applied} applied, ${completed}/${cues} runs completed; met: ${met}`,
  )
  return {
    value: socket.length + other.length + (busy.length - busyWell.length),
    unit: 'answers failed (socket errors, wrong codes, busy without 503 + Retry-After)',
    baseline: null,
    ratio: null,
    target:
      'none lost: each answered or BUSY with HTTP 503 + Retry-After; no socket error; every cue applied exactly once after retries',
    met,
    detail: {
      offered: offered.length,
      cues,
      answered: answered.length,
      busy: busy.length,
      busyWith503AndRetryAfter: busyWell.length,
      otherErrors: codes,
      socketErrors: socketCodes,
      lost,
      answersAtRetry: r.retries.map((x) => x.length),
      appliedInAll: applied,
      completedBeforeRetriesSettled: resolved,
      completed,
      answerMs: spread(first.map((a) => a.ms)),
      wallMs: Math.round(r.wallMs),
    },
  }
}

/** Per-second schedules, without and then with a hostile viewer's runChanges subscriptions. */
export async function hostilePhase(s: BenchServer, clients: ClientsProcess): Promise<BenchResult> {
  if (HOSTILE_SECONDS <= 0 || TICKERS <= 0) return skipped('SHOWTIME_HOSTILE_SECONDS or SHOWTIME_TICKERS')
  const defs = await createShows(s, {
    prefix: 'tick-',
    shows: TICKERS,
    perDefinition: 1,
    schedule: '* * * * * *',
    program: EVERY_SECOND,
  })
  // A per-second schedule is made ahead in a window of occurrences; the
  // count never settles (each second some come due and more are made), so
  // give the first windows a fixed few seconds before measuring.
  await sleep(SETTLE_MS)
  const health = async (from: number, to: number) => {
    const rep = await clients.ask<{ health: HealthSample[] }>({ type: 'health' }, 'healthReport')
    return spread(rep.health.filter((h) => h.at >= from && h.at <= to).map((h) => h.ms))
  }
  const window = async (label: string) => {
    const from = Date.now() + 1000
    const to = from + HOSTILE_SECONDS * 1000
    await sleep(to - Date.now())
    await sleep(2 * TICK_MS + 500)
    const rows = await s.app.db.query<{ status: string; lag: number | null }>(
      `SELECT status, TIMESTAMPDIFF(MICROSECOND, scheduled_for, started_at) / 1000 AS lag FROM event_runs
        WHERE definition_id BETWEEN ? AND ? AND scheduled_for >= ? AND scheduled_for < ?`,
      [defs.from, defs.to, new Date(from), new Date(to)],
    )
    const lags = rows.filter((r) => r.lag !== null).map((r) => Number(r.lag))
    const out = {
      due: rows.length,
      startLagMs: spread(lags),
      notStarted: rows.length - lags.length,
      missed: rows.filter((r) => r.status === 'missed').length,
      healthzMs: await health(from, to),
    }
    console.log(`showtimeHostile: ${label}: ${JSON.stringify(out)}`)
    return out
  }
  const quiet = await window('no hostile subscriber')
  const ready = await clients.ask<{ subscribed: number }>(
    { type: 'hostile', sockets: HOSTILE_SOCKETS, perSocket: HOSTILE_PER_SOCKET },
    'hostileReady',
  )
  const cpu0 = process.cpuUsage()
  const hostile = await window(`${ready.subscribed} runChanges subscriptions on ${HOSTILE_SOCKETS} sockets`)
  const cpu = process.cpuUsage(cpu0)
  const stopped = await clients.ask<{ deliveries: number; refused: number }>(
    { type: 'hostileStop' },
    'hostileStopped',
  )
  console.log(
    `showtimeHostile: ${ready.subscribed} asked for, ${stopped.refused} refused (SUBSCRIPTIONS_PER_PRINCIPAL / _PER_INSTANCE), ${stopped.deliveries} deliveries`,
  )
  const limit = 2 * TICK_MS
  // Both windows are under the API's load (the dashboards and operators stay
  // connected, and the schedules' first runs are news to them): both must hold.
  const within = (w: typeof quiet) => w.startLagMs.p99 <= limit && w.missed === 0 && w.notStarted === 0
  const met = within(quiet) && within(hostile)
  return {
    value: hostile.startLagMs.p99,
    unit: 'ms (due-run start lag p99 with the hostile subscriber)',
    baseline: quiet.startLagMs.p99,
    ratio: quiet.startLagMs.p99 > 0 ? hostile.startLagMs.p99 / quiet.startLagMs.p99 : null,
    target: `start lag p99 <= 2 x TICK_MS (${limit} ms), 0 MISSED, every due run started, in both windows`,
    met,
    detail: {
      tickers: TICKERS,
      seconds: HOSTILE_SECONDS,
      sockets: HOSTILE_SOCKETS,
      perSocket: HOSTILE_PER_SOCKET,
      subscribed: ready.subscribed,
      refused: stopped.refused,
      deliveries: stopped.deliveries,
      quiet,
      hostile,
      serverCpuSecondsInHostileWindow: Math.round((cpu.user + cpu.system) / 1e4) / 100,
    },
  }
}
