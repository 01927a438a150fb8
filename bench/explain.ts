/**
 * `npm run explain`: the plan of every statement an idle tick, a `/metrics`
 * scrape, `/readyz` and the `health` query issue, at 1,000,000 finished runs
 * and 100,000 scheduled ahead, written to docs/query-plans.md.
 *
 * The statements are not copied here: the real code runs (a runner's first
 * tick, the run counter, the probes' reads) on a database wrapped to record
 * each statement and its arguments, and each recorded statement is then
 * EXPLAINed with those arguments. A change that moves a statement off its
 * index shows up in the diff of the generated file.
 *
 * The database is a private MariaDB started for the occasion (as `npm start`
 * does without DATABASE_URL) unless EXPLAIN_DATABASE_URL names one already
 * filled by bench/historyData.ts. EXPLAIN_RUNS sets the history's size.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createDb, type Db, type Queryable, type SqlValue } from '../sql/db.ts'
import * as logs from '../sql/eventRunLogs.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as steps from '../sql/eventSteps/index.ts'
import * as inboxDoorbells from '../sql/inboxDoorbells.ts'
import { migrate, pendingMigrations } from '../sql/migrate.ts'
import * as heartbeats from '../sql/runnerHeartbeats.ts'
import { startPrivateMariadb } from '../src/privateMariadb.ts'
import { createRunCounts } from '../src/runCounts.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { fillHistory } from './historyData.ts'
import { runMain } from './lib.ts'

const FINISHED = Number(process.env.EXPLAIN_RUNS ?? 1_000_000)
const OUT = new URL('../docs/query-plans.md', import.meta.url)

interface Recorded {
  group: string
  what: string
  sql: string
  args: readonly SqlValue[]
}

/** `db` whose statements (transactions' included) are recorded under the current label. */
function recording(db: Db, into: Recorded[], label: () => { group: string; what: string }): Db {
  const wrapQ = <Q extends Queryable>(q: Q): Q =>
    new Proxy(q, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver)
        if (prop === 'transaction') {
          return (fn: (tx: Queryable) => Promise<unknown>, opts?: unknown) =>
            (target as unknown as Db).transaction((tx) => fn(wrapQ(tx)), opts as never)
        }
        if (prop === 'execute' || prop === 'run' || prop === 'query' || prop === 'runQuery') {
          return (sql: string, args: readonly SqlValue[] = []) => {
            into.push({ ...label(), sql, args })
            return (value as (s: string, a: readonly SqlValue[]) => Promise<unknown>).call(target, sql, args)
          }
        }
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
  return wrapQ(db)
}

const compact = (sql: string) => sql.replace(/\s+/g, ' ').trim()

/** What each statement of the tick is, recognised by its text. */
const NAMES: [RegExp, string][] = [
  [
    /^UPDATE event_runs SET claimed_by = NULL.*claim_expires_at < (\?|NOW\(3\))$/,
    'reclaim expired run leases',
  ],
  [/STRAIGHT_JOIN event_run_steps/, 'reclaim expired step leases'],
  [/FROM event_definitions WHERE state = 'active'/, 'materialisation check: the definitions to look at'],
  [/idx_evrun_due\) WHERE r\.status = 'scheduled' AND r\.scheduled_for < \? - INTERVAL/, 'missed sweep'],
  [
    /woken_while_claimed = 0 WHERE id = \? AND status = \?/,
    'the answer claims its run for the runner in its process',
  ],
  [/SET claimed_by = \?, claim_token = \?/, 'lease due in-flight runs'],
  [
    /idx_evrun_wake\) WHERE r\.wake_at = \? AND r\.claim_token = \?/,
    'lease due in-flight runs: read what it leased',
  ],
  [/FOR UPDATE SKIP LOCKED/, 'start: lock due key-less runs'],
  [/idx_evrun_keyed_due\) WHERE r\.keyed_due_at <= \?/, 'due keyed runs'],
  [/FROM event_run_logs WHERE id > \?/, 'log retention: the oldest lines'],
  [/DELETE FROM runner_heartbeats/, 'heartbeat prune'],
  [/AND ended_at < \?$/, 'log retention: which runs of old lines ended before the cutoff'],
  [/^DELETE FROM event_run_logs/, 'log retention: delete the lines of those runs'],
  [/^DELETE l FROM event_run_logs l LEFT JOIN event_runs/, 'log retention: old lines of deleted runs'],
  [/INSERT INTO runner_heartbeats/, 'heartbeat'],
  [/MAX\(id\), 0\) AS id FROM event_runs WHERE created_at/, 'the id mark'],
  [/SUM\(id <= \?\)/, 'the count up to the marks'],
  [/ended_at > \? AND ended_at <= \?/, 'moving the ended mark: runs ended in between'],
  [/MAX\(id\), \?\) AS id FROM event_runs WHERE id > \?/, 'moving the id mark'],
  [/WHERE id > \? AND id <= \?/, 'moving the id mark: runs made in between'],
  [/COUNT\(\*\) AS n FROM event_runs WHERE id > \?$/, 'runs made past the id mark'],
  [/ended_at > \? AND status IN/, 'runs ended past the ended mark'],
  [/GROUP BY status$/, 'runs in flight, by status'],
]

async function main(): Promise<void> {
  let url = process.env.EXPLAIN_DATABASE_URL
  let stopServer: (() => Promise<void>) | null = null
  if (!url) {
    const dir = await mkdtemp(join(tmpdir(), 'sr-explain-'))
    const server = await startPrivateMariadb({ dir, database: 'showrunner' })
    url = server.url
    stopServer = async () => {
      await server.stop()
      await rm(dir, { recursive: true, force: true })
    }
  }
  const db = createDb(url, { connectionLimit: 4 })
  try {
    await migrate(db)
    const [existing] = await db.query<{ n: number }>('SELECT COUNT(*) AS n FROM event_runs')
    if (Number(existing?.n ?? 0) === 0) {
      console.log(`explain: filling ${FINISHED} finished runs and ${FINISHED / 10} ahead…`)
      await fillHistory(db, { finished: FINISHED, ahead: Math.floor(FINISHED / 10) })
    }
    const recorded: Recorded[] = []
    let current = { group: '', what: '' }
    const rec = recording(db, recorded, () => current)
    const as = async (group: string, what: string, fn: () => Promise<unknown>) => {
      current = { group, what }
      await fn()
    }
    const now = new Date()

    const runner = new Runner({ db: rec, registry: createDefaultRegistry(), instanceId: 'explain' })
    await as(
      'Runner: an idle tick',
      'a first tick (it also runs log retention and the heartbeat prune)',
      () => runner.tick(),
    )
    await as('Runner: an idle tick', 'log retention: which runs of old lines ended before the cutoff', () =>
      runs.endedBefore(rec, [1, 2, 3], new Date(now.getTime() - 30 * 86_400_000)),
    )
    await as('Runner: an idle tick', 'log retention: delete the lines of those runs', () =>
      logs.deleteForRuns(rec, [0]),
    )
    // Issued only when the lease took runs (an idle tick's takes none).
    await as('Runner: an idle tick', 'lease due in-flight runs: read what it leased', () =>
      runs.findLeased(rec, 'explain:none', new Date(now.getTime() + 30_000)),
    )
    await as(
      'Runner: a woken run (the wake lane, after a GO or a timer)',
      'read what it leased, with each run’s next step',
      () => runs.findLeasedWithSteps(rec, 'explain:none', new Date(now.getTime() + 30_000), '='),
    )
    const [someStep] = await db.query<{ id: number | null }>('SELECT MIN(id) AS id FROM event_run_steps')
    await as(
      'A GO (a cue answered)',
      'the answer’s first read: the step, its run and the step after it',
      () => runs.getStepWithRun(rec, Number(someStep?.id ?? 0)),
    )
    await as('A GO (a cue answered)', 'the answer claims its run for the runner in its process', () =>
      runs.claimAnswered(rec, 0, 'running', {
        owner: 'explain',
        token: 'explain:none',
        leaseUntil: new Date(now.getTime() + 45_000),
        now,
      }),
    )
    await as(
      'Cue inboxes: doorbells',
      'an inbox says where its doorbell is (renewed while it has subscribers)',
      () => inboxDoorbells.announce(rec, 'explain', { connectionId: 1, server: 'explain:3306' }),
    )
    await as('Cue inboxes: doorbells', 'a runner elsewhere reads the live doorbells', () =>
      inboxDoorbells.liveInboxDoorbells(rec, new Date(now.getTime() - 60_000), 'someone-else'),
    )
    await as('Cue inboxes: doorbells', 'the heartbeat prune forgets silent ones', () =>
      inboxDoorbells.pruneBefore(rec, new Date(now.getTime() - 600_000)),
    )
    await as('Cue inboxes: doorbells', 'an inbox with no subscribers left withdraws its doorbell', () =>
      inboxDoorbells.withdraw(rec, 'explain'),
    )
    await as('Definitions', 'a grace change re-stamps the scheduled runs', () => runs.resetMissedAt(rec, 1))

    const counts = createRunCounts(rec, { advanceEveryMs: 0 })
    await as(
      '/metrics and health: runs by status',
      'the first call of a process (counts the table once)',
      () => counts(),
    )
    await as('/metrics and health: runs by status', 'every later call (the marks move once a minute)', () =>
      counts(),
    )
    await as('/metrics and health: attention', 'degraded runs', () => runs.countDegraded(rec))
    await as('/metrics and health: attention', 'steps waiting on a person', () => steps.waitingSummary(rec))
    await as('health', 'live runners', () => heartbeats.listLive(rec, new Date(now.getTime() - 30_000)))
    await as('/readyz', 'pending migrations', () => pendingMigrations(rec))

    const [version] = await db.query<{ v: string }>('SELECT VERSION() AS v')
    const [sizes] = await db.query<Record<string, number>>(
      `SELECT (SELECT COUNT(*) FROM event_runs) AS runs,
              (SELECT COUNT(*) FROM event_runs WHERE status = 'scheduled') AS scheduled,
              (SELECT COUNT(*) FROM event_runs WHERE ended_at IS NOT NULL) AS finished,
              (SELECT COUNT(*) FROM event_run_steps) AS steps,
              (SELECT COUNT(*) FROM event_run_logs) AS logs`,
    )
    const out: string[] = [
      '# Query plans of the idle path',
      '',
      'Generated by `npm run explain` (bench/explain.ts); do not edit by hand. Every statement an idle',
      'runner tick, a `/metrics` scrape, `/readyz` and the `health` query issue, the cue inboxes’',
      'doorbells, the wake lane’s read of what it leased and a GO’s read and claim, recorded from the real',
      'code and EXPLAINed with its own arguments, on a database of',
      `${sizes?.runs} runs (${sizes?.finished} finished, ${sizes?.scheduled} scheduled ahead, the rest in flight), ${sizes?.steps} steps and`,
      `${sizes?.logs} log lines (bench/historyData.ts), MariaDB ${version?.v}.`,
      '',
      'What to look for in review: every `event_runs`, `event_run_steps` and `event_run_logs` access is',
      'a `range`, `ref`, `eq_ref` or `const` on the index named, with `rows` near what the statement',
      'returns. Only the first run-count of a process reads the whole table (`ALL`), once; every later',
      'call reads the index ranges past its marks. `rows` is the optimiser’s estimate, not a count:',
      'it ignores LIMIT (the oldest log lines are read 1,000 at most), and EXPLAIN of the heartbeat’s',
      'INSERT … ON DUPLICATE KEY UPDATE shows no access path (it is a primary-key upsert). “No',
      'matching min/max row” and “Impossible WHERE” mean the optimiser answered from the index',
      'ends without reading rows. Rows actually read are asserted by test/idle.rowsRead.test.ts.',
      '',
    ]
    let group = ''
    const seen = new Set<string>()
    for (const r of recorded) {
      const sql = compact(r.sql)
      if (seen.has(sql)) continue
      seen.add(sql)
      if (/^(SHOW|SET|SELECT 1$|SELECT NOW\(3\))/i.test(sql)) continue
      if (r.group !== group) {
        group = r.group
        out.push(`## ${group}`, '')
      }
      let plan: Record<string, unknown>[]
      try {
        plan = await db.query<Record<string, unknown>>(`EXPLAIN ${r.sql}`, [...r.args])
      } catch (err) {
        plan = [{ error: String((err as Error).message).slice(0, 200) }]
      }
      const name = NAMES.find(([re]) => re.test(sql))?.[1] ?? r.what
      out.push(`### ${name}`, '', '```sql', sql.length > 600 ? `${sql.slice(0, 600)} …` : sql, '```', '')
      const cols = ['table', 'type', 'key', 'rows', 'Extra'] as const
      out.push(`| ${cols.join(' | ')} |`, `|${cols.map(() => '---').join('|')}|`)
      for (const p of plan) {
        if ('error' in p) {
          out.push(`| ${String(p.error)} | | | | |`)
          continue
        }
        out.push(`| ${cols.map((c) => String(p[c] ?? '').replace(/\|/g, '\\|')).join(' | ')} |`)
      }
      out.push('')
    }
    await writeFile(OUT, `${out.join('\n').trimEnd()}\n`)
    console.log(`explain: ${seen.size} statements written to docs/query-plans.md`)
  } finally {
    await db.close()
    await stopServer?.()
  }
}

runMain(import.meta.url, main)
