/**
 * The definitions the Galera drill (galera.drill.ts) creates for its three
 * instances: every-second, every-5-seconds and every-10-seconds schedules over
 * several scopes, concurrency keys per scope, a `core.wait`, a `core.cue` the
 * drill answers, and webhooks to the drill's receiver (each `core.webhook`
 * step's url is filled in with the receiver's when the definition is created).
 * Each carries its period, from which the drill counts the occurrences it expects.
 */

/** Webhook step timeout: generous, so a slow answer on two busy cores is not retried (a second call). */
const WEBHOOK_TIMEOUT_S = 20

export interface DefSpec {
  slug: string
  schedule: string
  periodMs: number
  scopes: string[]
  concurrencyKey: string | null
  steps: unknown[]
}

const hook = (tag: string) => ({
  kind: 'core.webhook',
  params: { url: '', body: { run: '{{run.id}}', tag } },
  timeoutSeconds: WEBHOOK_TIMEOUT_S,
})

export const DEFS: DefSpec[] = [
  {
    slug: 'keyed-every-5s',
    schedule: '*/5 * * * * *',
    periodMs: 5000,
    scopes: Array.from({ length: 8 }, (_, i) => `k${i}`),
    concurrencyKey: 'key:{{run.scope}}',
    steps: [
      hook('keyed'),
      { kind: 'core.wait', params: { seconds: 2 } },
      { kind: 'core.log', params: { message: 'done' } },
    ],
  },
  {
    slug: 'free-every-second',
    schedule: '* * * * * *',
    periodMs: 1000,
    scopes: ['a', 'b', 'c'],
    concurrencyKey: null,
    steps: [hook('free'), { kind: 'core.log', params: { message: 'done' } }],
  },
  {
    slug: 'cued-every-10s',
    schedule: '*/10 * * * * *',
    periodMs: 10_000,
    scopes: ['x', 'y'],
    concurrencyKey: 'cue:{{run.scope}}',
    steps: [
      { kind: 'core.cue', params: { prompt: 'go?', timeoutSeconds: 240 } },
      hook('cued'),
      { kind: 'core.log', params: { message: 'done' } },
    ],
  },
]
