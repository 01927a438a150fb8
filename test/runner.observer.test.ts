/** The runner reports every tick's duration and lag to its observer (what /metrics exposes). */
import { expect, it } from 'vitest'
import { Runner } from '../src/runner/runner.ts'
import { createDefaultRegistry } from '../src/runner/steps/registry.ts'
import { useTestDb } from './helpers/db.ts'

const t = useTestDb()

it('reports tick duration and tick lag on every tick, and errors on failed ticks', async () => {
  const seen = { durations: [] as number[], lags: [] as number[], errors: 0 }
  const observer = {
    tickDuration: (ms: number) => seen.durations.push(ms),
    tickLag: (ms: number) => seen.lags.push(ms),
    tickError: () => {
      seen.errors++
    },
  }
  const runner = new Runner({ db: t.db, registry: createDefaultRegistry(), tickMs: 20, observer })
  runner.start()
  for (let i = 0; i < 100 && seen.lags.length < 3; i++) await new Promise((r) => setTimeout(r, 20))
  await runner.stop()
  expect(seen.lags.length).toBeGreaterThanOrEqual(3)
  expect(seen.lags.every((ms) => Number.isFinite(ms) && ms >= 0)).toBe(true)
  expect(seen.durations.length).toBeGreaterThanOrEqual(3)
  expect(seen.errors).toBe(0)
})
