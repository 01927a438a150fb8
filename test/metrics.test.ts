import { describe, expect, it } from 'vitest'
import { createLogger } from '../src/log.ts'
import { createMetrics } from '../src/metrics.ts'
import { captureLog } from './helpers/logCapture.ts'

/** The value of one sample line in Prometheus text, or undefined when absent. */
function sample(body: string, series: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

describe('createMetrics', () => {
  it('gives every call its own registry', () => {
    const a = createMetrics()
    const b = createMetrics()
    a.claimConflicts.inc()
    expect(a.registry).not.toBe(b.registry)
    expect(() => createMetrics()).not.toThrow()
  })

  it('renders every showrunner metric and the process metrics as Prometheus text', async () => {
    const m = createMetrics()
    m.httpRequestDuration.observe({ method: 'POST', route: '/graphql', status: '200' }, 0.02)
    m.resolverDuration.observe({ field: 'Query.runs' }, 0.003)
    m.tickDuration.observe(0.1)
    m.claimConflicts.inc()
    m.tickErrors.inc(2)
    m.steps.inc({ kind: 'core.log', outcome: 'completed' })
    m.openSubscriptions.set(3)
    m.tickLagMs.set(12)
    const { contentType, body } = await m.render()
    expect(contentType).toMatch(/^text\/plain; version=0\.0\.4/)
    for (const name of [
      'showrunner_http_request_duration_seconds',
      'showrunner_resolver_duration_seconds',
      'showrunner_tick_duration_seconds',
      'showrunner_claim_conflicts_total',
      'showrunner_tick_errors_total',
      'showrunner_steps_total',
      'showrunner_runs_by_status',
      'showrunner_open_subscriptions',
      'showrunner_tick_lag_ms',
      'showrunner_waiting_steps',
      'showrunner_oldest_waiting_step_age_seconds',
      'showrunner_degraded_runs',
      'process_cpu_seconds_total',
      'nodejs_eventloop_lag_seconds',
    ]) {
      expect(body).toContain(`# TYPE ${name} `)
    }
    expect(
      sample(
        body,
        'showrunner_http_request_duration_seconds_count{method="POST",route="/graphql",status="200"}',
      ),
    ).toBe(1)
    expect(sample(body, 'showrunner_resolver_duration_seconds_count{field="Query.runs"}')).toBe(1)
    expect(sample(body, 'showrunner_claim_conflicts_total')).toBe(1)
    expect(sample(body, 'showrunner_tick_errors_total')).toBe(2)
    expect(sample(body, 'showrunner_steps_total{kind="core.log",outcome="completed"}')).toBe(1)
    expect(sample(body, 'showrunner_open_subscriptions')).toBe(3)
    expect(sample(body, 'showrunner_tick_lag_ms')).toBe(12)
  })

  it('can leave out the process metrics', async () => {
    const { body } = await createMetrics({ defaultMetrics: false }).render()
    expect(body).not.toContain('process_cpu_seconds_total')
    expect(body).toContain('showrunner_tick_errors_total')
  })

  it('reads runs by status from the source on each scrape, zero-filling known statuses', async () => {
    const m = createMetrics({ defaultMetrics: false })
    let counts: Record<string, number> = { running: 2, scheduled: 5 }
    let calls = 0
    m.setRunsByStatusSource(async () => {
      calls++
      return counts
    })
    let { body } = await m.render()
    expect(sample(body, 'showrunner_runs_by_status{status="running"}')).toBe(2)
    expect(sample(body, 'showrunner_runs_by_status{status="scheduled"}')).toBe(5)
    expect(sample(body, 'showrunner_runs_by_status{status="missed"}')).toBe(0)
    counts = { completed: 1 }
    ;({ body } = await m.render())
    expect(sample(body, 'showrunner_runs_by_status{status="running"}')).toBe(0)
    expect(sample(body, 'showrunner_runs_by_status{status="completed"}')).toBe(1)
    expect(calls).toBe(2)
    m.setRunsByStatusSource(null)
    ;({ body } = await m.render())
    expect(body).not.toContain('showrunner_runs_by_status{')
    expect(calls).toBe(2)
  })

  it('reads waiting steps, the oldest one’s age and degraded runs from one source call per scrape', async () => {
    let nowMs = Date.parse('2026-11-30T12:00:00Z')
    const m = createMetrics({ defaultMetrics: false, now: () => nowMs })
    let body = (await m.render()).body
    // No source: the series are absent, not a reassuring 0.
    expect(body).toContain('# TYPE showrunner_waiting_steps gauge')
    expect(sample(body, 'showrunner_waiting_steps')).toBeUndefined()
    expect(sample(body, 'showrunner_oldest_waiting_step_age_seconds')).toBeUndefined()
    expect(sample(body, 'showrunner_degraded_runs')).toBeUndefined()

    let calls = 0
    let snapshot = {
      waitingSteps: 3,
      oldestWaitingStepAt: new Date('2026-11-30T11:58:30Z') as Date | null,
      degradedRuns: 2,
    }
    m.setAttentionSource(async () => {
      calls++
      return snapshot
    })
    body = (await m.render()).body
    expect(calls).toBe(1)
    expect(sample(body, 'showrunner_waiting_steps')).toBe(3)
    expect(sample(body, 'showrunner_oldest_waiting_step_age_seconds')).toBe(90)
    expect(sample(body, 'showrunner_degraded_runs')).toBe(2)

    nowMs += 30_000
    body = (await m.render()).body
    expect(calls).toBe(2)
    expect(sample(body, 'showrunner_oldest_waiting_step_age_seconds')).toBe(120)

    snapshot = { waitingSteps: 0, oldestWaitingStepAt: null, degradedRuns: 0 }
    body = (await m.render()).body
    expect(sample(body, 'showrunner_waiting_steps')).toBe(0)
    expect(sample(body, 'showrunner_oldest_waiting_step_age_seconds')).toBe(0)

    m.setAttentionSource(null)
    body = (await m.render()).body
    expect(sample(body, 'showrunner_waiting_steps')).toBeUndefined()
    expect(calls).toBe(3)
  })

  it('leaves the waiting-step series out of a scrape whose source fails or hangs, logging it once', async () => {
    const { lines, stream: destination } = captureLog()
    const m = createMetrics({
      log: createLogger({ destination }),
      sourceTimeoutMs: 50,
      defaultMetrics: false,
    })
    m.setAttentionSource(async () => ({ waitingSteps: 4, oldestWaitingStepAt: null, degradedRuns: 1 }))
    expect(sample((await m.render()).body, 'showrunner_waiting_steps')).toBe(4)
    m.setAttentionSource(async () => {
      throw new Error('database is down')
    })
    let { body } = await m.render()
    expect(body).toContain('showrunner_tick_errors_total')
    for (const series of [
      'showrunner_waiting_steps',
      'showrunner_oldest_waiting_step_age_seconds',
      'showrunner_degraded_runs',
    ])
      expect(sample(body, series), series).toBeUndefined()
    m.setAttentionSource(() => new Promise(() => {}))
    ;({ body } = await m.render())
    expect(sample(body, 'showrunner_waiting_steps')).toBeUndefined()
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      ['warn', 'metrics: could not read the steps waiting on people'],
      ['warn', 'metrics: could not read the steps waiting on people'],
    ])
  })

  it('logs a failing or hanging source instead of failing the scrape', async () => {
    const { lines, stream: destination } = captureLog()
    const m = createMetrics({ log: createLogger({ destination }), sourceTimeoutMs: 50 })
    m.setRunsByStatusSource(async () => ({ running: 1 }))
    await m.render()
    m.setRunsByStatusSource(async () => {
      throw new Error('database is down')
    })
    let { body } = await m.render()
    expect(body).toContain('process_cpu_seconds_total')
    // The last good values are dropped rather than reported as current.
    expect(body).not.toContain('showrunner_runs_by_status{')
    m.setRunsByStatusSource(() => new Promise(() => {}))
    ;({ body } = await m.render())
    expect(body).toContain('showrunner_tick_errors_total')
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      ['warn', 'metrics: could not read runs by status'],
      ['warn', 'metrics: could not read runs by status'],
    ])
  })
})
