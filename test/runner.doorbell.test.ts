/**
 * The runner's doorbell (src/runner/doorbell.ts, sql/doorbell.ts,
 * src/doorbellRinger.ts): an instance without a runner that makes a run due
 * wakes the runner at once, where it used to wait for the runner's next tick.
 * The runner here ticks every 10 s, so a GO within 2 s can only be the ring.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openDoorbell, ringOnServer } from '../sql/doorbell.ts'
import { liveDoorbells } from '../sql/runnerHeartbeats.ts'
import { createDefinition, must, startRun } from './helpers/consoleScene.ts'
import { eventually, sleep, startSecondInstance, startTestServer, type TestServer } from './helpers/server.ts'

const TICK_MS = 10_000

interface StepTimes {
  kind: string
  status: string
  startedAt: string | null
  endedAt: string | null
}

async function stepsOf(s: TestServer, runId: string): Promise<Array<StepTimes & { id: string }>> {
  const d = await must<{ run: { steps: Array<StepTimes & { id: string }> } }>(
    s,
    'query ($id: ID!) { run(id: $id) { steps { id kind status startedAt endedAt } } }',
    { id: runId },
  )
  return d.run.steps
}

describe('the doorbell, in SQL', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer()
  })
  afterAll(async () => {
    await s?.close()
  })

  it('a sleep rung on its own server ends at once; a ring for another server or a gone connection ends nothing', async () => {
    const bell = await openDoorbell(s.app.db)
    try {
      expect(bell.connectionId).toBeGreaterThan(0)
      expect(bell.server).toMatch(/:\d+$/)
      // Addressed to another server: not rung, the sleep runs its course.
      const t0 = performance.now()
      const quiet = bell.wait(1)
      await sleep(100)
      expect(await ringOnServer(s.app.db, { ...bell, server: 'elsewhere:3306' })).toBe('elsewhere')
      expect(await quiet).toBe(false)
      expect(performance.now() - t0).toBeGreaterThanOrEqual(950)
      // Rung: the 30 s sleep ends now, and the connection serves the next sleep.
      const t1 = performance.now()
      const rung = bell.wait(30)
      await sleep(100)
      expect(await ringOnServer(s.app.db, bell)).toBe('rung')
      expect(await rung).toBe(true)
      expect(performance.now() - t1).toBeLessThan(5000)
      expect(await bell.wait(0)).toBe(false)
      // No such connection: nothing to ring, and nothing thrown.
      expect(await ringOnServer(s.app.db, { connectionId: 2 ** 40, server: bell.server })).toBe('gone')
      expect(await ringOnServer(s.app.db, { connectionId: -1, server: bell.server })).toBe('gone')
    } finally {
      await bell.end()
    }
  })

  it("a listed address that now names a stranger's connection (ids restart with the server) interrupts nothing", async () => {
    // The stranger: any other connection of the same user, busy with a statement of its own.
    const stranger = await s.app.db.openConnection()
    try {
      const [idRows] = await stranger.query('SELECT CONNECTION_ID() AS id')
      const connectionId = Number((idRows as Array<{ id: number }>)[0]?.id)
      const bell = await openDoorbell(s.app.db)
      try {
        const t0 = performance.now()
        const busy = stranger.query('SELECT SLEEP(1.5) AS slept')
        await sleep(200)
        // Rung as if it were the doorbell listed under that id: the look finds no doorbell's sleep.
        expect(await ringOnServer(s.app.db, { connectionId, server: bell.server })).toBe('idle')
        const [rows] = await busy
        // SLEEP answers 0 when it ran its course, 1 when it was interrupted.
        expect(Number((rows as Array<{ slept: number }>)[0]?.slept)).toBe(0)
        expect(performance.now() - t0).toBeGreaterThanOrEqual(1400)
        // A doorbell between two sleeps is there but not asleep: nothing to end.
        expect(await ringOnServer(s.app.db, bell)).toBe('idle')
      } finally {
        await bell.end()
      }
    } finally {
      stranger.destroy()
    }
  })
})

describe('a runner ticking every 10 s behind an instance without a runner', () => {
  let runnerInstance: TestServer
  let api: TestServer
  let definitionId: string

  beforeAll(async () => {
    runnerInstance = await startTestServer({
      runner: true,
      env: { TICK_MS: String(TICK_MS), LEASE_MS: '30000' },
    })
    api = await startSecondInstance(runnerInstance, {
      env: { TICK_MS: String(TICK_MS), LEASE_MS: '30000', INSTANCE_ID: `doorbell-api-${process.pid}` },
    })
    definitionId = await createDefinition(runnerInstance, {
      slug: 'go-elsewhere',
      title: 'GO from elsewhere',
      program: {
        phases: [
          {
            name: 'show',
            steps: [
              { kind: 'core.cue', params: { prompt: 'Go?' } },
              { kind: 'core.log', params: { message: 'went' } },
              { kind: 'core.cue', params: { prompt: 'Again?' } },
              { kind: 'core.log', params: { message: 'went again' } },
            ],
          },
        ],
      },
    })
    // The doorbell's address goes out with the runner's heartbeat, after its first pass.
    await eventually(
      async () =>
        (await liveDoorbells(runnerInstance.app.db, new Date(Date.now() - 60_000))).length === 1 || null,
      15_000,
    )
  }, 60_000)
  afterAll(async () => {
    await api?.close()
    await runnerInstance?.close()
  })

  it('a run started and cues answered there start their next steps within 2 s, each by a ring', async () => {
    const runner = runnerInstance.app.runner
    if (!runner?.doorbell) throw new Error('the runner has no doorbell')
    const ringsBefore = runner.doorbell.rings
    const asked = Date.now()
    const runId = await startRun(api, definitionId, 'stage-1')
    const cueIds: string[] = []
    for (const [index, seq] of [
      [0, 1],
      [2, 3],
    ] as const) {
      // The cue is open (the run started, or the previous answer moved it on) well before a tick.
      const cue = await eventually(async () => {
        const steps = await stepsOf(api, runId)
        const c = steps[index]
        return c?.status === 'RUNNING' ? c : null
      }, 5000)
      if (index === 0) expect(Date.parse(cue.startedAt as string) - asked).toBeLessThan(2000)
      cueIds.push(cue.id)
      await sleep(300)
      const answered = await api.gql<{ resolveCue: { applied: boolean } }>(
        'mutation ($id: ID!) { resolveCue(stepId: $id) { applied } }',
        { variables: { id: cue.id } },
      )
      expect(answered.body.data?.resolveCue.applied).toBe(true)
      const next = await eventually(async () => {
        const steps = await stepsOf(api, runId)
        const n = steps[seq]
        return n?.startedAt ? { cue: steps[index] as StepTimes, next: n } : null
      }, 5000)
      // GO: the cue's end to the next step's start, on the database's clock.
      expect(Date.parse(next.next.startedAt as string) - Date.parse(next.cue.endedAt as string)).toBeLessThan(
        2000,
      )
    }
    expect(runner.doorbell.rings - ringsBefore).toBeGreaterThanOrEqual(3)
    expect(cueIds).toHaveLength(2)
  }, 30_000)

  it('a doorbell whose connection is cut opens another, which rings', async () => {
    const doorbell = runnerInstance.app.runner?.doorbell
    const first = doorbell?.address
    if (!doorbell || !first) throw new Error('the runner has no doorbell address')
    await runnerInstance.app.db.runQuery(`KILL CONNECTION ${first.connectionId}`)
    const second = await eventually(async () => {
      const a = doorbell.address
      return a && a.connectionId !== first.connectionId ? a : null
    }, 5000)
    const before = doorbell.rings
    // Rung again until heard: a ring before its first sleep begins ends nothing.
    await eventually(async () => {
      expect(await ringOnServer(runnerInstance.app.db, second)).toBe('rung')
      await sleep(50)
      return doorbell.rings > before ? true : null
    }, 5000)
  })

  it('a second runner is rung too; stopping it ends its sleep at once and takes it off the list', async () => {
    const { app: second } = await startSecondInstance(runnerInstance, {
      env: {
        RUNNER: 'on',
        TICK_MS: String(TICK_MS),
        LEASE_MS: '30000',
        INSTANCE_ID: `doorbell-second-${process.pid}`,
      },
    })
    let stopped = false
    try {
      const bells = () => liveDoorbells(runnerInstance.app.db, new Date(Date.now() - 60_000))
      await eventually(async () => ((await bells()).length === 2 ? true : null), 15_000)
      // The ringer reads the list of doorbells again once its copy is 2 s old.
      await sleep(2100)
      const before = second.runner?.doorbell?.rings ?? 0
      await startRun(api, definitionId, 'stage-2')
      await eventually(async () => ((second.runner?.doorbell?.rings ?? 0) > before ? true : null), 5000)
      // Its doorbell sleeps for a minute at a time: a stop that waited for the sleep would take that long.
      const t0 = performance.now()
      await second.stop()
      stopped = true
      expect(performance.now() - t0).toBeLessThan(5000)
      expect((await bells()).map((b) => b.instanceId)).toEqual([runnerInstance.config.instanceId])
    } finally {
      if (!stopped) await second.stop()
    }
  }, 40_000)
})
