/**
 * One server instance of bench/showtimeScaleOut.ts in a process of its own,
 * as a deployment runs it: bench/server.ts startBenchServer (buildApp through
 * loadConfig, the defaults) with the settings it is given (RUNNER=off for an
 * API-only instance), under `npm start`'s node flags (the parent passes them).
 * Driven over IPC (see {@link InstanceCommand}); measures its own event-loop
 * delay and RSS, as bench/showtime.ts does in-process for the single instance.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { serverStatements } from './scheduled.ts'
import { type BenchServer, startBenchServer } from './server.ts'

export type InstanceCommand =
  | { type: 'start'; databaseUrl: string; env: Record<string, string> }
  /** Start a measured window: the event-loop histogram and the RSS peak restart. */
  | { type: 'reset' }
  | { type: 'stats' }
  | { type: 'stop' }

export interface InstanceStats {
  type: 'stats'
  eldP99Ms: number
  eldMaxMs: number
  rssMb: number
  rssPeakMb: number
  /** Statements sent by the instance's pools since it started (the API's and the runner's). */
  statements: number
}

const ELD_RESOLUTION_MS = 10
const send = (msg: unknown) => process.send?.(msg)
const mb = (bytes: number) => Math.round(bytes / 2 ** 20)

let server: BenchServer | null = null
const eld = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS })
eld.enable()
let rssPeak = 0
const rssTimer = setInterval(() => {
  rssPeak = Math.max(rssPeak, process.memoryUsage().rss)
}, 100)

process.on('message', (cmd: InstanceCommand) => {
  const run = async () => {
    switch (cmd.type) {
      case 'start': {
        server = await startBenchServer(cmd.databaseUrl, cmd.env)
        send({ type: 'started', graphqlUrl: server.graphqlUrl, wsUrl: server.wsUrl })
        return
      }
      case 'reset': {
        eld.reset()
        rssPeak = process.memoryUsage().rss
        send({ type: 'reset' })
        return
      }
      case 'stats': {
        const stats: InstanceStats = {
          type: 'stats',
          eldP99Ms: Math.round(Math.max(0, eld.percentile(99) / 1e6 - ELD_RESOLUTION_MS)),
          eldMaxMs: Math.round(Math.max(0, eld.max / 1e6 - ELD_RESOLUTION_MS)),
          rssMb: mb(process.memoryUsage().rss),
          rssPeakMb: mb(rssPeak),
          statements: server ? serverStatements(server) : 0,
        }
        send(stats)
        return
      }
      case 'stop': {
        clearInterval(rssTimer)
        await server?.stop()
        send({ type: 'stopped' })
        process.exit(0)
      }
    }
  }
  run().catch((err) => {
    send({ type: 'failed', error: String((err as Error)?.stack ?? err) })
    process.exit(1)
  })
})
// The parent went away (a crash, Ctrl-C): do not outlive it.
process.on('disconnect', () => process.exit(0))
