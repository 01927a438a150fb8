/**
 * Subscription events are executed once per distinct (document, variables,
 * role) and fanned out (src/api/sharedSubscribe.ts), through real graphql-ws
 * sockets: many viewers with the same selection cost one execution per change
 * (and one measure of its size), and sharing never hands one role's result to another (an admin sees a
 * webhook's literal header, a viewer "[redacted]"), nor one document's to
 * another.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as runs from '../sql/eventRuns/index.ts'
import { answerSizeChecks } from '../src/api/answerSize.ts'
import { sharedExecutions } from '../src/api/sharedSubscribe.ts'
import { makeDefinition, makeRun } from './helpers/fixtures.ts'
import { eventually, startTestServer, type TestServer, wsClient, wsSubscribe } from './helpers/server.ts'

const PROGRAM = {
  phases: [
    {
      name: 'main',
      steps: [
        {
          kind: 'core.webhook',
          params: {
            url: 'https://example.com/hook',
            method: 'POST',
            headers: { 'x-api-key': 'literal-secret-value' },
          },
        },
      ],
    },
  ],
}
const WATCH = `subscription ($f: RunFilter) { runChanges(filter: $f) { id status version { program } } }`
const WATCH_OTHER = `subscription ($f: RunFilter) { runChanges(filter: $f) { id status scope } }`

interface Change {
  runChanges: { id: string; status: string; version?: { program: unknown }; scope?: string }
}

describe('runChanges events are executed once per (document, variables, role)', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer({ env: { STATUS_POLL_MS: '100' } })
  })
  afterAll(async () => {
    await s?.close()
  })

  it('twenty viewers and an admin: one execution per role, each role its own redaction', async () => {
    const fx = await makeDefinition(s.t.db, { program: PROGRAM })
    const run = await makeRun(s.t.db, { definition: fx })
    const f = { definitionId: String(fx.def.id) }
    const viewer = wsClient(s, 'viewer')
    const admin = wsClient(s, 'admin')
    const viewers = Array.from({ length: 20 }, () => wsSubscribe<Change>(viewer, WATCH, { f }))
    const admins = [wsSubscribe<Change>(admin, WATCH, { f })]
    const other = wsSubscribe<Change>(viewer, WATCH_OTHER, { f })
    try {
      // Every subscription listening, from its baseline (a fixed wait lost a
      // late subscriber on a loaded machine: it never saw the change).
      await eventually(() => s.app.runChanges.listenerCount === 22, 10_000)
      const before = { ...sharedExecutions }
      const sizesBefore = { ...answerSizeChecks }
      await runs.transition(s.t.db, run.id, 'scheduled', 'running')
      const running = (e: { data?: Change | null }) => e.data?.runChanges.status === 'RUNNING'
      const got = await Promise.all([...viewers, ...admins, other].map((c) => c.until(running, 5000)))
      const executed = sharedExecutions.executed - before.executed
      const shared = sharedExecutions.shared - before.shared
      // Three keys: viewers' WATCH, the admin's WATCH, the viewer's other document.
      expect(executed).toBe(3)
      expect(shared).toBe(19)
      // Each shared result is measured against the answer-size cap once, not per subscriber.
      expect(answerSizeChecks.measured - sizesBefore.measured).toBe(3)
      expect(answerSizeChecks.reused - sizesBefore.reused).toBe(19)
      const headerOf = (e: (typeof got)[number]) =>
        JSON.stringify(e.data?.runChanges.version?.program ?? null).includes('literal-secret-value')
      expect(got.slice(0, 20).every((e) => !headerOf(e))).toBe(true)
      expect(got.slice(0, 20).every((e) => JSON.stringify(e.data).includes('[redacted]'))).toBe(true)
      expect(headerOf(got[20] as (typeof got)[number])).toBe(true)
      expect(got[21]?.data?.runChanges).toEqual({ id: String(run.id), status: 'RUNNING', scope: run.scope })
    } finally {
      for (const c of [...viewers, ...admins, other]) c.stop()
      await Promise.all([viewer.dispose(), admin.dispose()])
    }
  })
})
