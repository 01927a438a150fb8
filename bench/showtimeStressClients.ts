/**
 * The stress clients of bench/showtimeClients.ts, for the stress phases of
 * bench/showtimeStress.ts: the burst of answers at once, and the hostile
 * subscriber holding `runChanges` subscriptions by the hundred.
 */
import type { createClient } from 'graphql-ws'
import { resolveCue } from './showtimeHttp.ts'
import type { BurstAnswer, Command } from './showtimeMessages.ts'
import { DASHBOARD, noteError, wsClient } from './showtimeOperators.ts'

export const hostileClients: ReturnType<typeof createClient>[] = []
let hostileDeliveries = 0
let hostileRefused = 0

/**
 * Every answer at once, each on its own connection; each one refused as busy
 * (or cut off at the socket) asks again on its own after its Retry-After, as
 * a well-behaved client does, at most `retryRounds` times and while
 * `timeoutMs` lasts. `retries[k]` holds the answers to every (k+1)-th try.
 */
export async function burst(cmd: Extract<Command, { type: 'burst' }>, graphqlUrl: URL, tokens: string[]) {
  const began = performance.now()
  const one = async (stepId: string, i: number): Promise<BurstAnswer> => {
    const t0 = performance.now()
    try {
      const a = await resolveCue(graphqlUrl, tokens[i % tokens.length] as string, stepId, false)
      const ra = a.headers['retry-after']
      return {
        status: a.status,
        code: a.code,
        retryAfter: ra === undefined ? null : String(ra),
        applied: a.applied,
        socketError: null,
        ms: performance.now() - t0,
      }
    } catch (err) {
      const e = err as NodeJS.ErrnoException
      return {
        status: 0,
        code: null,
        retryAfter: null,
        applied: null,
        socketError: e.code ?? e.message,
        ms: performance.now() - t0,
      }
    }
  }
  const retries: BurstAnswer[][] = []
  const answerWithRetries = async (stepId: string, i: number): Promise<BurstAnswer> => {
    const first = await one(stepId, i)
    let last = first
    for (let k = 0; k < cmd.retryRounds; k++) {
      if (last.code !== 'BUSY' && last.socketError === null) break
      const waitS = Math.min(10, Number(last.retryAfter ?? 1) || 1)
      if (performance.now() + waitS * 1000 - began > cmd.timeoutMs) break
      await new Promise((r) => setTimeout(r, waitS * 1000))
      last = await one(stepId, i)
      const atRetry = retries[k] ?? []
      retries[k] = atRetry
      atRetry.push(last)
    }
    return first
  }
  const first = await Promise.all(cmd.stepIds.map((id, i) => answerWithRetries(id, i)))
  return { first, retries, wallMs: performance.now() - began }
}

export async function hostile(cmd: Extract<Command, { type: 'hostile' }>, wsUrl: string, token: string) {
  let subscribed = 0
  for (let s = 0; s < cmd.sockets; s++) {
    const client = wsClient(wsUrl, token)
    hostileClients.push(client)
    for (let k = 0; k < cmd.perSocket; k++) {
      client.subscribe<{ runChanges: { id: string } }>(
        { query: DASHBOARD },
        {
          next(result) {
            const code = result.errors?.[0]?.extensions?.code
            // Past SUBSCRIPTIONS_PER_PRINCIPAL (or _PER_INSTANCE) the server refuses: what it should do.
            if (code === 'TOO_MANY_OPERATIONS' || code === 'BUSY') hostileRefused++
            else if (result.errors?.length) noteError(`hostile: ${result.errors[0]?.message}`)
            else hostileDeliveries++
          },
          error(err) {
            noteError(`hostile socket: ${err instanceof Error ? err.message : JSON.stringify(err)}`)
          },
          complete() {},
        },
      )
      subscribed++
    }
  }
  return subscribed
}

/** Every hostile subscription dropped; its deliveries are counted up to the drop. */
export async function stopHostile(): Promise<{ deliveries: number; refused: number }> {
  const deliveries = hostileDeliveries
  await Promise.race([
    Promise.allSettled(hostileClients.map((c) => c.dispose())),
    new Promise((r) => setTimeout(r, 3000)),
  ])
  return { deliveries, refused: hostileRefused }
}
