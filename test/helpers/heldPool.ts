/**
 * Hold the API pool's connections (a server started with DB_POOL_SIZE=1), to
 * show that something (a live feed on a connection of its own) does not wait
 * for them; then show the API itself is still waiting, and let it go.
 */
import type { TestServer } from './server.ts'

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export interface HeldPool {
  /** A query over HTTP has not been answered 300 ms after it was sent: the pool is still held. */
  apiIsWaiting(): Promise<boolean>
  /** Let the connection go, and wait for what was waiting on it. */
  release(): Promise<void>
}

export async function holdApiPool(s: TestServer): Promise<HeldPool> {
  let letGo = () => {}
  const held = s.app.db.withConnection(() => new Promise<void>((r) => (letGo = r)))
  const asked: Promise<unknown>[] = []
  await sleep(50)
  return {
    async apiIsWaiting() {
      const query = s.gql('{ health { ok } }', { auth: 'viewer' })
      asked.push(query)
      const raced = await Promise.race([query.then(() => 'answered'), sleep(300).then(() => 'waiting')])
      return raced === 'waiting'
    },
    async release() {
      letGo()
      await held
      await Promise.all(asked)
    },
  }
}
