/**
 * What the hostile drill (hostile.drill.ts) runs beside the server, and the
 * readings it takes: a /healthz prober and a burster of clients, each a child
 * process of its own, so the drill's own work does not count as the server's
 * latency; the prober's latencies as figures and the bound they are held to;
 * and the server's own event-loop delay and CPU seconds.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { percentile } from './lib.ts'

/** The /healthz p99 the flood may not push past. */
const HEALTHZ_P99_MS = 100

/**
 * The child's program: GET `url` every `everyMs` for `forMs` (and on, up to
 * four times as long, until it has `minSamples`), then print the latencies as JSON.
 */
const PROBER = `
const [url, forMs, everyMs, minSamples] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3]), Number(process.argv[4] ?? 0)]
let end = Date.now() + forMs
let wanted = minSamples
// SIGTERM ends the probing after the request in hand, and the figures are printed as usual.
process.on('SIGTERM', () => { end = 0; wanted = 0 })
const latencies = [], problems = []
// One unrecorded request first: a fresh process's first fetch loads and compiles
// the HTTP client and opens its connection (130-330 ms on a loaded 2-core
// machine), which is the prober's start-up, not the server's answer.
try { await (await fetch(url, { signal: AbortSignal.timeout(5000) })).arrayBuffer() } catch {}
while (Date.now() < end || (latencies.length < wanted && Date.now() < end + 3 * forMs)) {
  const t0 = performance.now()
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5000) })
    await res.arrayBuffer()
    if (res.status !== 200) problems.push('/healthz answered ' + res.status)
  } catch (err) { problems.push('/healthz failed: ' + err.message) }
  latencies.push(performance.now() - t0)
  await new Promise((r) => setTimeout(r, everyMs))
}
process.stdout.write(JSON.stringify({ latencies, problems }))
`

/** A prober's latencies as figures: how many, p50, p99 and the slowest, in whole ms. */
export function latencyFigures(latencies: readonly number[]) {
  return {
    samples: latencies.length,
    p50Ms: Math.round(percentile([...latencies], 50)),
    p99Ms: Math.round(percentile([...latencies], 99)),
    maxMs: Math.round(Math.max(0, ...latencies)),
  }
}

/**
 * The /healthz p99 a case may not pass: HEALTHZ_P99_MS, unless the machine
 * alone (no load) already answers slower than half that at p99; then twice
 * what it manages alone, so the drill measures the server, not its neighbours.
 */
export function healthzBound(quiet: readonly number[]): number {
  return Math.max(HEALTHZ_P99_MS, 2 * Math.round(percentile([...quiet], 99)))
}

export async function probeInChild(
  url: string,
  forMs: number,
  everyMs: number,
  minSamples = 0,
  until?: Promise<unknown>,
): Promise<{ latencies: number[]; problems: string[] }> {
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', PROBER, url, String(forMs), String(everyMs), String(minSamples)],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  )
  let out = ''
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString()
  })
  const exited = once(child, 'exit')
  // `until` settling ends the probing early (the prober prints what it has).
  void until?.finally(() => child.kill('SIGTERM'))
  const [code] = (await exited) as [number | null]
  if (code !== 0) return { latencies: [], problems: [`the prober exited with ${code}`] }
  return JSON.parse(out)
}

/**
 * The child's program: keep `conc` POSTs of `body` in flight to `url` for at
 * most `forMs`, or until SIGTERM (node:http on keep-alive sockets, lighter
 * than fetch), then print a tally by status and code. It prints the line
 * `under way` once every one of its clients has had a first answer: from
 * then on the `conc` requests are in flight on open connections.
 */
export const BURSTER = `
import { Agent, request } from 'node:http'
const [url, token, body, conc, forMs] = [new URL(process.argv[1]), process.argv[2], process.argv[3], Number(process.argv[4]), Number(process.argv[5])]
// Each client keeps its connection, as 2,000 browsers would: node's Agent closes free sockets
// past maxFreeSockets (256 by default), and the clients then reconnect all the time.
const agent = new Agent({ keepAlive: true, maxSockets: conc, maxFreeSockets: conc })
let end = Date.now() + forMs
process.on('SIGTERM', () => { end = 0 })
const tally = {}
const bump = (k) => { tally[k] = (tally[k] ?? 0) + 1 }
const one = () => new Promise((resolve) => {
  const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent, headers: {
    'content-type': 'application/json', 'content-length': Buffer.byteLength(body), authorization: 'Bearer ' + token,
  } }, (res) => {
    let text = ''
    res.setEncoding('utf8')
    res.on('data', (d) => { text += d })
    res.on('end', () => {
      let code = 'ok'
      try { code = JSON.parse(text).errors?.[0]?.extensions?.code ?? 'ok' } catch { code = 'unparsable' }
      bump(res.statusCode + ' ' + code)
      resolve(res.statusCode)
    })
  })
  req.setTimeout(30000, () => req.destroy(new Error('timeout')))
  req.on('error', (err) => {
    // The server closed a keep-alive socket as it was reused (a starved client idled past
    // keepAliveTimeout): asked again on a new one, as node's documentation advises.
    if (req.reusedSocket && err.code === 'ECONNRESET') { bump('retried on a new socket'); resolve(one()); return }
    bump('failed ' + (err.code ?? err.message))
    resolve(0)
  })
  req.end(body)
})
let answeredOnce = 0
async function worker() {
  let first = true
  while (Date.now() < end) {
    const status = await one()
    if (first && ++answeredOnce === conc) process.stdout.write('under way' + String.fromCharCode(10))
    first = false
    // A refused client waits a little before it asks again, as a well-behaved one does (briefly here).
    if (status === 503) await new Promise((r) => setTimeout(r, 50))
  }
}
await Promise.all(Array.from({ length: conc }, worker))
agent.destroy()
process.stdout.write(JSON.stringify(tally))
`

/** The server's own event-loop delay since the last scrape (p99 and max, ms), from /metrics. */
export async function loopDelay(url: string): Promise<{ p99Ms: number; maxMs: number }> {
  const text = await fetch(`${url}/metrics`).then((r) => r.text())
  const read = (name: string) => Math.round(1000 * Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1]))
  return { p99Ms: read('nodejs_eventloop_lag_p99_seconds'), maxMs: read('nodejs_eventloop_lag_max_seconds') }
}

/** CPU seconds (user + system) a process has used so far. */
export function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
  return (Number(fields[11]) + Number(fields[12])) / 100
}
