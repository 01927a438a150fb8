/**
 * Everyone around the show of bench/showtime.ts, in their own process so the
 * server's CPU, event loop and RSS are its own: the webhook receiver (answers
 * after 15 ms), the operators (graphql-ws inbox subscriptions, answering the cues
 * they own with `resolveCue` over HTTP, four in flight each; one cue in ten is
 * also answered by the next operator, who must get `applied: false`), the
 * dashboards (graphql-ws `runChanges`), a `/healthz` prober, the burst of
 * answers at once and the hostile subscriber. Driven over IPC by
 * bench/showtime.ts (see {@link Command}); every loop here is bounded in count
 * and in time, and every address is loopback.
 *
 * This module is the process: the receiver, its own event-loop delay and the
 * IPC; the operators, dashboards and probers are in bench/showtimeOperators.ts,
 * the burst and the hostile subscriber in bench/showtimeStressClients.ts, the
 * messages in bench/showtimeMessages.ts.
 *
 * Times are this process's `Date.now()`; the server stamps steps with the same
 * machine's clock (MariaDB's NOW(3) and node's), so they compare directly.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { RECEIVER_MS } from './showtimeFigures.ts'
import type { BurstReport, ClientsReport, Command } from './showtimeMessages.ts'
import {
  answers,
  clients,
  connect,
  dashboardDeliveries,
  errors,
  health,
  sightings,
  stop,
} from './showtimeOperators.ts'
import { burst, hostile, hostileClients, stopHostile } from './showtimeStressClients.ts'

const ELD_RESOLUTION_MS = 10
const eld = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS })
eld.enable()
const eldSinceLastReport = () => {
  const figures = {
    p99Ms: Math.max(0, Math.round(eld.percentile(99) / 1e6 - ELD_RESOLUTION_MS)),
    maxMs: Math.max(0, Math.round(eld.max / 1e6 - ELD_RESOLUTION_MS)),
  }
  eld.reset()
  return figures
}

const send = (msg: unknown) => process.send?.(msg)

// ---------------------------------------------------------------- receiver
const receiverKeys: string[] = []
const receiver = createServer((req, res) => {
  receiverKeys.push(String(req.headers['idempotency-key'] ?? ''))
  req.resume()
  req.on('end', () => {
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 })
      res.end('ok')
    }, RECEIVER_MS)
  })
})
receiver.keepAliveTimeout = 60_000

let connected: Extract<Command, { type: 'connect' }> | null = null

process.on('message', (cmd: Command) => {
  const run = async () => {
    switch (cmd.type) {
      case 'connect': {
        connected = cmd
        send({ type: 'connected', ...(await connect(cmd)), errors: errors.slice(0, 5) })
        return
      }
      case 'report': {
        const report: ClientsReport = {
          type: 'report',
          health,
          answers,
          sightings: [...sightings.values()],
          dashboardDeliveries,
          receiverKeys,
          errors,
          rssMb: process.memoryUsage().rss / 2 ** 20,
          eld: eldSinceLastReport(),
        }
        send(report)
        return
      }
      case 'instant': {
        eld.reset()
        return
      }
      case 'health': {
        // Only the prober's samples: the full report can be megabytes of deliveries.
        send({ type: 'healthReport', health })
        return
      }
      case 'burst': {
        if (!connected) throw new Error('burst before connect')
        const r = await burst(cmd, new URL(connected.graphqlUrls[0] as string), connected.operatorTokens)
        send({ type: 'burstDone', ...r } satisfies BurstReport)
        return
      }
      case 'hostile': {
        if (!connected) throw new Error('hostile before connect')
        const subscribed = await hostile(cmd, connected.wsUrls[0] as string, connected.viewerToken)
        send({ type: 'hostileReady', subscribed })
        return
      }
      case 'hostileStop': {
        send({ type: 'hostileStopped', ...(await stopHostile()) })
        return
      }
      case 'finish': {
        stop()
        await Promise.race([
          Promise.allSettled([...clients, ...hostileClients].map((c) => c.dispose())),
          new Promise((r) => setTimeout(r, 2000)),
        ])
        receiver.closeAllConnections()
        receiver.close()
        process.exit(0)
      }
    }
  }
  run().catch((err) => {
    send({ type: 'failed', error: String((err as Error)?.stack ?? err) })
    process.exit(1)
  })
})

receiver.listen(0, '127.0.0.1', () => {
  const { port } = receiver.address() as AddressInfo
  send({ type: 'receiver', url: `http://127.0.0.1:${port}/hook` })
})
