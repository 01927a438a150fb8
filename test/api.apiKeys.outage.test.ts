/**
 * An API key presented while the database is unreachable: the request is
 * answered DATABASE_UNAVAILABLE (never a crash, never "invalid token"), and
 * bootstrap tokens keep working, since they need no database.
 */
import { afterAll, beforeAll, expect, it } from 'vitest'
import WebSocket from 'ws'
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { type App, buildApp } from '../src/server.ts'
import { SHOWRUNNER_TOKENS, TOKENS } from './helpers/server.ts'

let app: App
let url: string

beforeAll(async () => {
  // Nothing listens on port 1: every statement fails to connect.
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: 'mysql://root@127.0.0.1:1/showrunner_nowhere',
    SHOWRUNNER_TOKENS,
    RUNNER: 'off',
    LOG_LEVEL: 'silent',
  })
  app = buildApp(config, { logger: silentLogger(), migrate: false })
  ;({ url } = await app.start())
})
afterAll(async () => {
  await app?.stop()
})

async function viewer(token: string) {
  const res = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: '{ viewer { name } }' }),
  })
  return (await res.json()) as {
    data?: { viewer: { name: string } }
    errors?: { message: string; extensions?: { code?: string } }[]
  }
}

it('answers DATABASE_UNAVAILABLE for a key while the database is away; bootstrap tokens still work', async () => {
  const r = await viewer(`sr_live_${'k'.repeat(43)}`)
  expect(r.errors?.[0]?.extensions?.code).toBe('DATABASE_UNAVAILABLE')
  expect(r.errors?.[0]?.message).not.toMatch(/SELECT|api_keys|ECONNREFUSED/)
  const boot = await viewer(TOKENS.viewer)
  expect(boot.data?.viewer.name).toMatch(/^viewer#/)
})

it('asks a WebSocket client with a key to retry (1013) rather than refusing it for good', async () => {
  const socket = new WebSocket(`${url.replace(/^http/, 'ws')}/graphql`, 'graphql-transport-ws')
  await new Promise((resolve) => socket.once('open', resolve))
  socket.send(
    JSON.stringify({
      type: 'connection_init',
      payload: { authorization: `Bearer sr_live_${'k'.repeat(43)}` },
    }),
  )
  const [code, reason] = await new Promise<[number, string]>((resolve) =>
    socket.once('close', (c, r) => resolve([c, r.toString()])),
  )
  expect(code).toBe(1013)
  expect(reason).toMatch(/try again later/i)
})
