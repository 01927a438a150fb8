/**
 * A closed-loop HTTP load client for the API latency benchmark, run in its own
 * process: `connections` keep-alive sockets, each sending the next request as
 * soon as the last answer is read in full. Requests started during the warm-up
 * are not sampled; every sampled request's latency is kept, so the
 * percentiles are exact rather than read off a histogram.
 *
 * Why not autocannon: on the 2-core machine its own CPU, spent in the same
 * window as the server's, showed up as the server's tail. Against the same
 * server, in alternating 5-s slices, it read p99 690–830 ms where this client
 * read 390–450 ms, with the same p50 and rate.
 *
 * Input: one JSON argument ({@link LoadSpec}). Output: one JSON line ({@link LoadResult}).
 */
import http from 'node:http'
import { percentile, runMain } from './lib.ts'

export interface LoadSpec {
  url: string
  headers: Record<string, string>
  body: string
  connections: number
  /** Sampled seconds. */
  seconds: number
  /** Seconds before sampling starts. */
  warmupSeconds: number
}

export interface LoadResult {
  p50: number
  p99: number
  max: number
  requests: number
  requestsPerSecond: number
  /** Non-2xx answers and failed requests, warm-up included. */
  errors: number
}

function send(agent: http.Agent, target: URL, spec: LoadSpec): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method: 'POST',
        agent,
        headers: { ...spec.headers, 'content-length': Buffer.byteLength(spec.body) },
      },
      (res) => {
        res.on('data', () => {})
        res.on('end', () => resolve(res.statusCode ?? 0))
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.end(spec.body)
  })
}

export async function load(spec: LoadSpec): Promise<LoadResult> {
  const target = new URL(spec.url)
  const agent = new http.Agent({ keepAlive: true, maxSockets: spec.connections })
  const started = performance.now()
  const sampleFrom = started + spec.warmupSeconds * 1000
  const sampleUntil = sampleFrom + spec.seconds * 1000
  const latencies: number[] = []
  let errors = 0
  await Promise.all(
    Array.from({ length: spec.connections }, async () => {
      while (performance.now() < sampleUntil) {
        const t0 = performance.now()
        try {
          const status = await send(agent, target, spec)
          if (status < 200 || status >= 300) errors++
        } catch {
          errors++
        }
        if (t0 >= sampleFrom) latencies.push(performance.now() - t0)
      }
    }),
  )
  agent.destroy()
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: Math.max(...latencies),
    requests: latencies.length,
    requestsPerSecond: latencies.length / spec.seconds,
    errors,
  }
}

runMain(import.meta.url, async () => {
  const result = await load(JSON.parse(process.argv[2] ?? '{}') as LoadSpec)
  process.stdout.write(`${JSON.stringify(result)}\n`)
})
