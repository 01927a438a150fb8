/**
 * Drill: three server processes, one per node of a three-node Galera cluster,
 * about two and a half minutes of per-second schedules, node 3 SIGKILLed
 * midway and brought back.
 *
 * The cluster is test/galera/cluster.sh's (started here if it is not running).
 * Three real `node --no-memory-reducer --import tsx src/cli.ts serve` processes start at the same
 * instant on a fresh database, instance N on node N only (so every migration,
 * claim and key is contended across nodes, where row locks do not reach). The
 * definitions (test/drills/galeraSchedules.ts): per-second and every-5-seconds
 * schedules over several scopes, concurrency keys per scope, a `core.wait`, a
 * `core.cue` the drill answers through the API, and webhooks to a receiver in
 * this process that counts calls per Idempotency-Key. After 40 s node 3's
 * mariadbd is SIGKILLed; 25 s later it is started again and rejoins (IST); the
 * drill runs 35 s more, then waits for every occurrence up to that instant to
 * end.
 *
 * Expected, and printed: every occurrence of every schedule has exactly one
 * run, and it completed (none failed, missed or stuck: the lost node is
 * unavailability to wait out, never a reason to fail a run); each webhook step
 * called its receiver exactly once (distinct keys = calls = webhook steps run);
 * no concurrency key was held by two runs, both in samples every 50 ms and in
 * the runs' start and end times; all three instances worked, and the one on
 * the killed node worked again once its node was back. The queries that read
 * these back from the database are in test/drills/galeraReadings.ts.
 *
 * A second, short test races the guards that are not exercised by schedules,
 * through nodes 1 and 2 at once: archiving a definition against starting a run
 * under it (the run is refused, or made first and cancelled by the archive;
 * never left live under an archived definition), and the same idempotent startRun (one run, the same
 * answer on both nodes, never an error).
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import { createDb, type Db } from '../../sql/db.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import { placeholders } from '../../sql/json.ts'
import { createDefinition } from '../../src/operations/definitions.ts'
import { startRun } from '../../src/operations/runControls.ts'
import { systemClock } from '../../src/runner/clock.ts'
import { createDefaultRegistry } from '../../src/runner/steps/registry.ts'
import {
  type ConflictCounters,
  cluster,
  conflictCounters,
  createClusterDatabase,
  NODE_PORTS,
  nodeUrl,
} from '../galera/cluster.ts'
import { startReceiver, type WebhookReceiver } from '../helpers/runnerHarness.ts'
import {
  countFinished,
  failureReasons,
  finishedByActor,
  keyOverlaps,
  occurrencesUpTo,
  webhookEffects,
} from './galeraReadings.ts'
import { DEFS } from './galeraSchedules.ts'
import {
  codesOf,
  postGql,
  report,
  type ServerProcess,
  SHOWRUNNER_TOKENS,
  sleep,
  spawnServer,
  startKeySampler,
  TOKENS,
  until,
} from './lib.ts'

/** How long the drill runs before the kill, how long node 3 stays down, and how long after it is back. */
const BEFORE_KILL_MS = 40_000
const DOWN_MS = 25_000
const AFTER_BACK_MS = 35_000

let receiver: WebhookReceiver
let database: { name: string; drop(): Promise<void> } | undefined
let servers: ServerProcess[] = []
const pools: Db[] = []
let node3Down = false

beforeAll(async () => {
  // Idempotent: a running cluster is left as it is; a stopped one starts with its data.
  console.log(`[drill:galera] ${await cluster(['start'])}`.replace(/\n/g, ' | '))
  database = await createClusterDatabase('showrunner_galera_drill')
  receiver = await startReceiver()
  receiver.route('/hooks/', () => ({ status: 200, delayMs: 5 + Math.floor(Math.random() * 20) }))
}, 300_000)

afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop(10_000)))
  await Promise.allSettled(pools.map((p) => p.close()))
  if (node3Down) await cluster(['start-node', '3']).catch((err) => console.log(String(err)))
  await database?.drop().catch((err) => console.log(String(err)))
  await receiver?.close()
  if (process.env.KEEP_GALERA !== '1') await cluster(['stop']).catch((err) => console.log(String(err)))
}, 300_000)

it('three instances on three Galera nodes, node 3 killed and back: one run per occurrence, each effect once, keys exclusive', async () => {
  const name = database?.name as string
  const inspect = createDb(nodeUrl(1, name), { connectionLimit: 3 })
  pools.push(inspect)
  const conflictsBefore = await Promise.all(NODE_PORTS.map((p) => conflictCounters(p)))

  // ── Three instances at the same instant, on a fresh database ─────────
  const t0 = Date.now()
  servers = await Promise.all(
    [1, 2, 3].map((n) =>
      spawnServer({
        name: `n${n}`,
        env: {
          DATABASE_URL: nodeUrl(n, name),
          SHOWRUNNER_TOKENS,
          TICK_MS: '250',
          // Longer than node 3 stays away: its instance's claims and in-flight
          // steps wait for it rather than being taken over (and run twice).
          LEASE_MS: '90000',
          MATERIALIZE_HORIZON_HOURS: '1',
          INSTANCE_ID: `galera-n${n}`,
          WEBHOOK_ALLOW: receiver.url,
          LOG_LEVEL: 'warn',
        },
        readyTimeoutMs: 90_000,
      }),
    ),
  )
  const spawnMs = Date.now() - t0
  const [s1, s2, s3] = servers as [ServerProcess, ServerProcess, ServerProcess]
  const migrations = await inspect.query<{ n: number }>('SELECT COUNT(*) AS n FROM schema_migrations')

  // ── Definitions ──────────────────────────────────────────────────────
  const defIds: number[] = []
  for (const d of DEFS) {
    const a = await postGql<{ createDefinition: { id: string } }>(s1.url, {
      query: 'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id } }',
      variables: {
        input: {
          slug: d.slug,
          title: d.slug,
          schedule: d.schedule,
          scopes: d.scopes,
          graceSeconds: 900,
          concurrencyKey: d.concurrencyKey,
          program: {
            phases: [
              {
                name: 'main',
                steps: d.steps.map((st) =>
                  (st as { kind: string }).kind === 'core.webhook'
                    ? {
                        ...(st as object),
                        params: {
                          ...(st as { params: object }).params,
                          url: `${receiver.url}/hooks/{{run.scope}}`,
                        },
                      }
                    : st,
                ),
              },
            ],
          },
        },
      },
    })
    const id = Number(a.body?.data?.createDefinition.id)
    expect(id, JSON.stringify(a.body)).toBeGreaterThan(0)
    defIds.push(id)
  }
  const startedAt = Date.now()

  // ── Watchers: key holders every 50 ms, cues answered through the API ──
  const sampler = startKeySampler(createDb(nodeUrl(1, name), { connectionLimit: 1 }), 50)
  let resolving = true
  const cueAnswers = { ok: 0, refused: 0, unreachable: 0 }
  const resolver = (async () => {
    let turn = 0
    while (resolving) {
      try {
        const parked = await inspect.query<{ id: number }>(
          `SELECT id FROM event_run_steps WHERE kind = 'core.cue' AND status = 'running' AND parked = 1 LIMIT 20`,
        )
        for (const p of parked) {
          // Any instance whose node is up; the API answer reflects the write wherever it was made.
          const live = node3Down ? [s1, s2] : servers
          const s = live[turn++ % live.length] as ServerProcess
          const a = await postGql<{ resolveCue: { applied: boolean } }>(
            s.url,
            {
              query: 'mutation ($id: ID!) { resolveCue(stepId: $id, note: "drill") { applied } }',
              variables: { id: String(p.id) },
            },
            { token: TOKENS.operator, timeoutMs: 15_000 },
          )
          if (a.body?.data?.resolveCue?.applied) cueAnswers.ok++
          else if (a.status === 0) cueAnswers.unreachable++
          else cueAnswers.refused++
        }
      } catch {
        // node 1 busy for a moment: look again next round
      }
      await sleep(500)
    }
  })()

  // ── Kill node 3 midway, bring it back ────────────────────────────────
  await sleep(BEFORE_KILL_MS)
  const finishedBeforeKill = await countFinished(inspect, defIds)
  // Node 3's counters restart from zero with it: keep what it had counted.
  const node3BeforeKill = await conflictCounters(NODE_PORTS[2])
  node3Down = true
  await cluster(['kill-node', '3'])
  const killedAt = Date.now()
  await sleep(DOWN_MS)
  const instance3AliveWhileDown = s3.alive()
  const apiWhileDown = await postGql(s3.url, { query: '{ definitions { id } }' }, { token: TOKENS.viewer })
  await cluster(['start-node', '3'])
  node3Down = false
  const backAt = Date.now()
  const [{ now: backDbTime } = { now: new Date() }] = await inspect.query<{ now: Date }>(
    'SELECT NOW(3) AS now',
  )
  await sleep(AFTER_BACK_MS)

  // ── Everything due up to the cutoff must end ──────────────────────────
  const [{ now: cutoff } = { now: new Date() }] = await inspect.query<{ now: Date }>('SELECT NOW(3) AS now')
  const unfinished = async () => {
    const [row] = await inspect.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id IN (${placeholders(defIds.length)}) AND scheduled_for <= ?
          AND status NOT IN ('completed','cancelled','failed','missed')`,
      [...defIds, cutoff],
    )
    return Number(row?.n ?? -1)
  }
  await until('every run due by the cutoff to end', async () => (await unfinished()) === 0, {
    timeoutMs: 150_000,
    everyMs: 500,
  }).catch(() => null)
  const stuck = await unfinished()
  const drainedAt = Date.now()
  resolving = false
  await resolver
  await sampler.stop()
  // Stop the instances (graceful): every call they made is then in the receiver's list.
  const exits = await Promise.all(servers.map((s) => s.stop(20_000)))
  const conflictsAfter = await Promise.all(NODE_PORTS.map((p) => conflictCounters(p)))
  const sum = (c: ConflictCounters) => c.certFailures + c.bfAborts
  const [b1, b2, b3] = conflictsBefore.map(sum) as [number, number, number]
  const [a1, a2, a3] = conflictsAfter.map(sum) as [number, number, number]
  const certificationConflicts = a1 - b1 + (a2 - b2) + (sum(node3BeforeKill) - b3) + a3

  // ── Occurrences: exactly one run each ────────────────────────────────
  const occurrences = await occurrencesUpTo(inspect, defIds, cutoff)

  // ── Effects: each webhook step called its receiver once ───────────────
  const { hookSteps, perKey, keysCalledTwice, keysWithoutStep, stepsWithoutCall, attempts } =
    await webhookEffects(inspect, defIds, receiver)

  // ── Keys: no two holders, in samples and in the runs' own times ────────
  const overlaps = await keyOverlaps(inspect, defIds)

  // ── Who worked, and the instance on the killed node after it came back ──
  const workedBy = await finishedByActor(inspect, defIds, backDbTime)
  const failedReasons = await failureReasons(inspect, defIds)

  const figures = {
    database: name,
    spawnMs,
    migrationsRecorded: Number(migrations[0]?.n ?? 0),
    runMs: drainedAt - startedAt,
    finishedBeforeKill,
    node3DownMs: backAt - killedAt,
    instance3AliveWhileDown,
    instance3ApiWhileDown: codesOf(apiWhileDown).join(',') || apiWhileDown.status,
    stuckAtCutoff: stuck,
    occurrences,
    webhookStepsRun: hookSteps.length,
    webhookAttempts: attempts,
    webhookCalls: receiver.calls.length,
    distinctIdempotencyKeys: perKey.size,
    keysCalledTwice: keysCalledTwice.length,
    keysWithoutStep: keysWithoutStep.length,
    stepsWithoutCall: stepsWithoutCall.length,
    cueAnswers,
    keySamples: sampler.samples,
    keySamplesFailed: sampler.failedSamples,
    keyViolationsSampled: sampler.violations.length,
    keyOverlapsInRunTimes: overlaps.length,
    runsFinishedBy: Object.fromEntries(workedBy.map((r) => [r.actor, Number(r.n)])),
    finishedAfterNode3Back: Object.fromEntries(workedBy.map((r) => [r.actor, Number(r.after_back)])),
    failedOrMissed: failedReasons,
    certificationConflicts,
    exits,
    serverErrorLogLines: Object.fromEntries(servers.map((s) => [s.name, s.errorLines().length])),
  }
  report('galera', figures)
  for (const s of servers)
    for (const line of s.errorLines().slice(0, 3))
      console.log(`[drill:galera] ${s.name} error log: ${line.slice(0, 300)}`)
  if (overlaps.length > 0) console.log('[drill:galera] key overlaps', overlaps.slice(0, 10))
  if (sampler.violations.length > 0)
    console.log('[drill:galera] sampled violations', sampler.violations.slice(0, 10))

  // ── Verdicts ──────────────────────────────────────────────────────────
  // Three migrators at once on three nodes: the files were applied once, and every instance started.
  expect(figures.migrationsRecorded).toBeGreaterThan(0)
  expect(instance3AliveWhileDown).toBe(true)
  expect(stuck).toBe(0)
  for (const o of occurrences) {
    expect(o.scopes, o.slug).toBe(DEFS.find((d) => d.slug === o.slug)?.scopes.length)
    expect(o.duplicates, o.slug).toBe(0)
    expect(
      o.runsPerScope.every((n) => n === o.expectedPerScope),
      `${o.slug} ${JSON.stringify(o)}`,
    ).toBe(true)
    expect(o.byStatus, o.slug).toEqual({ completed: o.expectedPerScope * o.scopes })
  }
  expect(keysCalledTwice).toEqual([])
  expect(keysWithoutStep).toEqual([])
  expect(stepsWithoutCall).toEqual([])
  expect(receiver.calls.length).toBe(hookSteps.length)
  expect(attempts).toBe(hookSteps.length)
  expect(sampler.violations).toEqual([])
  expect(overlaps).toEqual([])
  for (const s of servers) expect(figures.runsFinishedBy[s.instanceId] ?? 0, s.name).toBeGreaterThan(0)
  expect(
    figures.finishedAfterNode3Back[s3.instanceId] ?? 0,
    'instance on node 3 after its node came back',
  ).toBeGreaterThan(0)
  expect(exits).toEqual(servers.map(() => ({ code: 0, signal: null })))
}, 600_000)

const ROUNDS = 20

it('across nodes: no live run under an archived definition; an idempotent startRun answers one run on both nodes', async () => {
  const name = database?.name as string
  const [a, b] = [
    createDb(nodeUrl(1, name), { connectionLimit: 4 }),
    createDb(nodeUrl(2, name), { connectionLimit: 4 }),
  ]
  pools.push(a, b)
  const registry = createDefaultRegistry()
  const program = { phases: [{ name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'hold' } }] }] }
  const outcomes = {
    archived: 0,
    runMadeThenCancelledByArchive: 0,
    runRefusedAsArchived: 0,
    archivedWithLiveRun: 0,
    sameRunBothNodes: 0,
    startRunErrors: [] as string[],
  }
  for (let i = 0; i < ROUNDS; i++) {
    const def = await createDefinition(
      { db: a, registry, clock: systemClock },
      { slug: `race-${i}`, title: `race ${i}`, program },
      'drill',
    )
    // An archive through node 1 against a new run through node 2, at the same moment.
    const [archived, started] = await Promise.allSettled([
      definitions.setState(a, def.id, 'archived'),
      startRun({ db: b, clock: systemClock }, { definitionId: def.id, scope: 's', actor: 'drill' }),
    ])
    const [live] = await a.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ? AND status NOT IN ('completed','cancelled','failed','missed')`,
      [def.id],
    )
    const isArchived = (await definitions.getById(a, def.id))?.state === 'archived'
    if (isArchived && Number(live?.n) > 0) outcomes.archivedWithLiveRun++
    if (isArchived && archived.status === 'fulfilled' && archived.value?.applied) outcomes.archived++
    if (started.status === 'fulfilled') outcomes.runMadeThenCancelledByArchive++
    else if (/archived/.test(String(started.reason))) outcomes.runRefusedAsArchived++
    else outcomes.startRunErrors.push(String(started.reason))

    // The same occurrence asked for through both nodes at once: one run, both answers name it.
    const at = new Date(Date.now() + 3_600_000 + i * 1000)
    const dup = await createDefinition(
      { db: a, registry, clock: systemClock },
      { slug: `dup-${i}`, title: `dup ${i}`, program },
      'drill',
    )
    const both = await Promise.allSettled(
      [a, b].map((db) =>
        startRun({ db, clock: systemClock }, { definitionId: dup.id, scope: 's', at, actor: 'drill' }),
      ),
    )
    const ids = both.map((r) => (r.status === 'fulfilled' ? r.value.id : `error: ${String(r.reason)}`))
    for (const r of both) if (r.status === 'rejected') outcomes.startRunErrors.push(String(r.reason))
    const [runsMade] = await a.query<{ n: number }>(
      'SELECT COUNT(*) AS n FROM event_runs WHERE definition_id = ?',
      [dup.id],
    )
    if (ids[0] === ids[1] && Number(runsMade?.n) === 1) outcomes.sameRunBothNodes++
  }
  report('galera-races', { rounds: ROUNDS, ...outcomes, startRunErrors: outcomes.startRunErrors.slice(0, 5) })
  expect(outcomes.archivedWithLiveRun).toBe(0)
  // With no run in progress the archive applies; the new run either came first
  // (and the archive cancelled it) or came second and was refused: never both kept.
  expect(outcomes.archived).toBe(ROUNDS)
  expect(outcomes.runMadeThenCancelledByArchive + outcomes.runRefusedAsArchived).toBe(ROUNDS)
  expect(outcomes.startRunErrors).toEqual([])
  expect(outcomes.sameRunBothNodes).toBe(ROUNDS)
}, 180_000)
