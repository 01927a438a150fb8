/**
 * A runner pass that outlasts a tick is warned of, naming the phase that took
 * the time: here the heartbeat, held up by a real row lock taken on another
 * connection. And the warning is rate-limited, counting what it did not say.
 */
import { expect, it } from 'vitest'
import { PassPhases, SLOW_PASS_WARN_EVERY_MS, SlowPassWarning } from '../src/runner/passPhases.ts'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'

const t = useTestDb()
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Warned {
  obj: Record<string, unknown>
  msg?: string
}

function capturingLogger() {
  const warnings: Warned[] = []
  const errors: Warned[] = []
  return {
    warnings,
    errors,
    logger: {
      info: () => {},
      debug: () => {},
      warn: (obj: object, msg?: string) => warnings.push({ obj: obj as Record<string, unknown>, msg }),
      error: (obj: object, msg?: string) => errors.push({ obj: obj as Record<string, unknown>, msg }),
    },
  }
}

it('warns of a pass held up by a locked heartbeat row, with the heartbeat as the slow phase', async () => {
  const { logger, warnings, errors } = capturingLogger()
  const instanceId = 'slow-pass-runner'
  const runner = new Runner({ db: t.db, registry: createDefaultRegistry(), tickMs: 300, instanceId, logger })
  runner.start()
  try {
    // Passes at a tick's pace, all quick: nothing to say.
    for (let i = 0; i < 100 && runner.lastTick === null; i++) await sleep(20)
    await sleep(300)
    expect(warnings.filter((w) => /outlasted a tick/.test(w.msg ?? ''))).toEqual([])

    // Another connection holds the runner's heartbeat row: its next beat waits for the lock.
    const other = t.open({ connectionLimit: 1 })
    await other.transaction(async (tx) => {
      await tx.query('SELECT instance_id FROM runner_heartbeats WHERE instance_id = ? FOR UPDATE', [
        instanceId,
      ])
      await sleep(900)
    })
    for (let i = 0; i < 100 && warnings.length === 0; i++) await sleep(20)
  } finally {
    await runner.stop()
  }
  const slow = warnings.filter((w) => /outlasted a tick/.test(w.msg ?? ''))
  expect(slow).toHaveLength(1)
  const obj = slow[0]?.obj as {
    totalMs: number
    tickMs: number
    phasesMs: Record<string, number>
    instance: string
  }
  expect(obj.instance).toBe(instanceId)
  expect(obj.tickMs).toBe(300)
  expect(obj.totalMs).toBeGreaterThan(600)
  // The time is the heartbeat's, and every other phase was quick.
  expect(obj.phasesMs.heartbeat).toBeGreaterThan(600)
  const others = Object.entries(obj.phasesMs).filter(([name]) => name !== 'heartbeat')
  expect(others.map(([name]) => name)).toEqual(
    expect.arrayContaining([
      'start',
      'claim',
      'handOff',
      'reclaim',
      'missed',
      'keyed',
      'giveBack',
      'retention',
    ]),
  )
  for (const [, ms] of others) expect(ms).toBeLessThan(600)
  expect(errors).toEqual([])
})

it('says nothing of a pass within its tick, and at most one warning a minute, counting the slow passes between', () => {
  const { logger, warnings } = capturingLogger()
  let now = 0
  const warning = new SlowPassWarning({ tickMs: 1000, logger, instanceId: 'x' }, () => now)
  const quick = new PassPhases()
  quick.mark('start')
  warning.passEnded(10, quick)
  expect(warnings).toEqual([])

  // A pass that waited most of a tick for a free flight and took a little more is slow as a whole.
  warning.passEnded(1200, quick)
  expect(warnings).toHaveLength(1)
  expect(warnings[0]?.obj).toMatchObject({ waitedForFlightMs: 1200, slowPasses: 1, phasesMs: { start: 0 } })

  now += SLOW_PASS_WARN_EVERY_MS / 2
  warning.passEnded(1500, quick)
  warning.passEnded(1500, quick)
  expect(warnings).toHaveLength(1)

  now += SLOW_PASS_WARN_EVERY_MS / 2
  warning.passEnded(2000, quick)
  expect(warnings).toHaveLength(2)
  expect(warnings[1]?.obj).toMatchObject({ slowPasses: 3, waitedForFlightMs: 2000 })
})

it('adds up a phase marked twice and measures each from the mark before it', async () => {
  const phases = new PassPhases()
  await sleep(30)
  phases.mark('a')
  await sleep(30)
  phases.mark('b')
  phases.mark('a')
  expect(phases.phases.a).toBeGreaterThanOrEqual(25)
  expect(phases.phases.b).toBeGreaterThanOrEqual(25)
  expect(phases.elapsedMs).toBeGreaterThanOrEqual(55)
  expect(Object.keys(phases.phases)).toEqual(['a', 'b'])
})
