/**
 * Separate pools and bounded waiting: the runner's ticks do not wait behind
 * API load, an API pool whose queue is full answers "busy" at once, and a
 * flood of unauthenticated scrapes costs a bounded number of statements.
 */
import { request as httpRequest } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  eventually,
  SESSION_PROGRAM,
  sleep,
  startTestServer,
  type TestServer,
  TOKENS,
} from './helpers/server.ts'

describe('probe snapshots', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer()
  })
  afterAll(async () => {
    await s?.close()
  })

  it('200 scrapes of /metrics and /readyz at once run a bounded number of statements', async () => {
    // Warm: the first scrape takes the first readings.
    await fetch(`${s.url}/metrics`).then((r) => r.text())
    await fetch(`${s.url}/readyz`).then((r) => r.text())
    const before = s.app.db.stats.statements
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        fetch(`${s.url}/${i % 2 === 0 ? 'metrics' : 'readyz'}`).then(async (r) => {
          await r.text()
          return r.status
        }),
      ),
    )
    expect(answers.every((status) => status === 200)).toBe(true)
    const statements = s.app.db.stats.statements - before
    // At most one refresh of each snapshot (runs by status: 2, attention: 2, readiness: 2), however long the flood took.
    expect(statements).toBeLessThanOrEqual(2 * 6)
  })
})

describe('the API pool queue is bounded', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer({ env: { DB_POOL_SIZE: '2', DB_QUEUE_LIMIT: '2' } })
  })
  afterAll(async () => {
    await s?.close()
  })

  it('past the queue, requests answer BUSY with HTTP 503 and Retry-After at once, with no SQL; then serve again', async () => {
    // Both connections busy for a second, the queue of two filled behind them.
    const held = Array.from({ length: 4 }, () =>
      s.app.db.query('SELECT SLEEP(1)').catch((err: unknown) => err),
    )
    await sleep(50)
    const t0 = performance.now()
    const answers = await Promise.all(Array.from({ length: 5 }, () => s.gql('{ runs(limit: 500) { id } }')))
    const ms = performance.now() - t0
    for (const a of answers) {
      // Load, not an outage: the database is up, this instance cannot take more now.
      expect(a.status).toBe(503)
      expect(a.headers.get('retry-after')).toBe('1')
      expect(a.body.errors?.[0]?.extensions).toEqual({ code: 'BUSY' })
      expect(a.body.errors?.[0]?.message).toMatch(/The server is busy: .*Retry in a moment/)
      expect(a.body.errors?.[0]?.message).not.toMatch(/SELECT|Queue limit/)
    }
    expect(ms).toBeLessThan(500)
    await Promise.all(held)
    const again = await s.gql('{ runs(limit: 500) { id } }')
    expect(again.body.errors).toBeUndefined()
  })

  it('the pool sizes are settings validated with clear messages', async () => {
    const { loadConfig, ConfigError } = await import('../src/config.ts')
    expect(() => loadConfig({ DB_POOL_SIZE: '0', DB_QUEUE_LIMIT: 'lots', RUNNER_DB_POOL_SIZE: '1' })).toThrow(
      ConfigError,
    )
    try {
      loadConfig({ DB_POOL_SIZE: '0', DB_QUEUE_LIMIT: 'lots', RUNNER_DB_POOL_SIZE: '1' })
    } catch (err) {
      expect((err as InstanceType<typeof ConfigError>).problems).toEqual([
        "DB_POOL_SIZE must be a whole number of connections from 1 to 1000 (got '0')",
        "DB_QUEUE_LIMIT must be a whole number of waiting statements from 1 to 1000000 (got 'lots')",
        "RUNNER_DB_POOL_SIZE must be a whole number of connections from 2 to 100 (got '1')",
      ])
    }
    expect(loadConfig({})).toMatchObject({ dbPoolSize: 10, dbQueueLimit: 100, runnerDbPoolSize: 8 })
  })
})

describe('the runner has its own pool', () => {
  const TICK_MS = 200
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer({
      runner: true,
      env: { TICK_MS: String(TICK_MS), DB_QUEUE_LIMIT: '100' },
    })
  })
  afterAll(async () => {
    await s?.close()
  })

  it('a run due while every API connection is busy starts within 2 × TICK_MS', async () => {
    const created = await s.gql<{ createDefinition: { id: string } }>(
      'mutation ($p: JSON!) { createDefinition(input: { slug: "pools", title: "Pools", program: $p }) { id } }',
      { variables: { p: SESSION_PROGRAM } },
    )
    const defId = created.body.data?.createDefinition.id as string
    const at = new Date(Date.now() + 1000)
    const started = await s.gql<{ startRun: { id: string } }>(
      `mutation { startRun(definitionId: "${defId}", at: "${at.toISOString()}") { id } }`,
    )
    const runId = started.body.data?.startRun.id as string
    expect(runId).toMatch(/^\d+$/)
    // Twelve 2-second statements: more than the API pool of 10 holds, queued ahead of any tick.
    const load = [
      ...Array.from({ length: 12 }, () => s.app.db.query('SELECT SLEEP(2)').catch((err: unknown) => err)),
      ...Array.from({ length: 20 }, () => s.gql('{ runs(limit: 500) { id } }').catch((err: unknown) => err)),
    ]
    let row: { scheduled_for: Date; started_at: Date | null } | undefined
    const deadline = Date.now() + 8000
    while (Date.now() < deadline) {
      ;[row] = await s.t.db.query<{ scheduled_for: Date; started_at: Date | null }>(
        'SELECT scheduled_for, started_at FROM event_runs WHERE id = ?',
        [runId],
      )
      if (row?.started_at) break
      await sleep(25)
    }
    await Promise.all(load)
    if (!row?.started_at) throw new Error(`run ${runId} did not start: ${JSON.stringify(row)}`)
    const lagMs = row.started_at.getTime() - row.scheduled_for.getTime()
    console.log(`[pools] run started ${lagMs} ms after it was due, with the API pool saturated`)
    expect(lagMs).toBeLessThan(2 * TICK_MS)
  })
})

describe('two thousand requests at once', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer()
  })
  afterAll(async () => {
    await s?.close()
  })

  it('each is answered (200, or BUSY with 503 and Retry-After); no connection is reset or refused', async () => {
    const target = new URL(s.graphqlUrl)
    const body = JSON.stringify({ query: '{ runs(limit: 50) { id status definition { slug } } }' })
    // Each on its own connection, all opened in the same turn of the event loop.
    const one = () =>
      new Promise<{ status: number; code: string | null; retryAfter: string | null; socket: string | null }>(
        (resolve) => {
          const req = httpRequest(
            {
              host: target.hostname,
              port: target.port,
              path: target.pathname,
              method: 'POST',
              agent: false,
              headers: {
                authorization: `Bearer ${TOKENS.viewer}`,
                'content-type': 'application/json',
                'content-length': Buffer.byteLength(body),
                connection: 'close',
              },
            },
            (res) => {
              let text = ''
              res.setEncoding('utf8')
              res.on('data', (d) => {
                text += d
              })
              res.on('end', () => {
                let code: string | null = null
                try {
                  code = JSON.parse(text).errors?.[0]?.extensions?.code ?? null
                } catch {
                  code = 'unparsable'
                }
                const ra = res.headers['retry-after']
                resolve({
                  status: res.statusCode ?? 0,
                  code,
                  retryAfter: ra ? String(ra) : null,
                  socket: null,
                })
              })
            },
          )
          req.setTimeout(60_000, () => req.destroy(new Error('no answer in 60 s')))
          req.on('error', (err: NodeJS.ErrnoException) =>
            resolve({ status: 0, code: null, retryAfter: null, socket: err.code ?? err.message }),
          )
          req.end(body)
        },
      )
    const answers = await Promise.all(Array.from({ length: 2000 }, one))
    const tally = new Map<string, number>()
    for (const a of answers) {
      const key = a.socket ? `socket ${a.socket}` : `${a.status} ${a.code ?? 'ok'}`
      tally.set(key, (tally.get(key) ?? 0) + 1)
    }
    console.log('[pools] 2,000 at once:', Object.fromEntries(tally))
    expect(answers.filter((a) => a.socket !== null)).toEqual([])
    for (const a of answers) {
      if (a.status === 200) expect(a.code).toBeNull()
      else expect(a).toMatchObject({ status: 503, code: 'BUSY', retryAfter: '1' })
    }
  }, 120_000)
})

describe('an answer the instance took is never answered BUSY', () => {
  let s: TestServer
  beforeAll(async () => {
    s = await startTestServer({ runner: true, env: { DB_POOL_SIZE: '2', DB_QUEUE_LIMIT: '3' } })
  })
  afterAll(async () => {
    await s?.close()
  })

  it('forty cues answered twice at once: every cue applied once, and exactly its applied answer says so', async () => {
    const CUES = 40
    const program = {
      phases: [
        { name: 'main', steps: [{ kind: 'core.cue', params: { prompt: 'Go?' } }] },
        { name: 'wrap-up', ending: true, steps: [{ kind: 'core.log', params: { message: 'done' } }] },
      ],
    }
    const created = await s.gql<{ createDefinition: { id: string } }>(
      'mutation ($p: JSON!) { createDefinition(input: { slug: "go-twice", title: "Go twice", program: $p }) { id } }',
      { variables: { p: program } },
    )
    const defId = created.body.data?.createDefinition.id as string
    for (let i = 0; i < CUES; i++) {
      const r = await s.gql(`mutation { startRun(definitionId: "${defId}", scope: "room-${i}") { id } }`, {
        auth: 'operator',
      })
      expect(r.body.errors).toBeUndefined()
    }
    const cueIds = await eventually(async () => {
      const r = await s.gql<{ waitingSteps: { id: string }[] }>('{ waitingSteps(limit: 500) { id } }')
      const ids = r.body.data?.waitingSteps.map((w) => w.id) ?? []
      return ids.length === CUES ? ids : null
    }, 20_000)
    // Keep the tiny pool's queue full meanwhile, so refusals can land at any
    // statement of an answer, and retry the refused answers as clients do.
    let pressing = true
    const pressure = Array.from({ length: 3 }, async () => {
      while (pressing) await s.app.db.query('SELECT SLEEP(0.01)').catch(() => sleep(2))
    })
    const answerOnce = async (id: string) => {
      const r = await s.gql<{ resolveCue: { applied: boolean } }>(
        'mutation ($id: ID!) { resolveCue(stepId: $id) { applied } }',
        { variables: { id }, auth: 'operator' },
      )
      return {
        id,
        status: r.status,
        applied: r.body.data?.resolveCue?.applied,
        code: r.body.errors?.[0]?.extensions?.code,
      }
    }
    type Answer = Awaited<ReturnType<typeof answerOnce>>
    const answers: Answer[] = []
    try {
      // Eight clients answering back to back, a refused answer going back in
      // the queue: arrivals interleave with the later statements of others.
      const queue = cueIds.flatMap((id) => [id, id])
      const deadline = Date.now() + 45_000
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (queue.length > 0 && Date.now() < deadline) {
            const id = queue.shift() as string
            const a = await answerOnce(id)
            answers.push(a)
            if (a.code === 'BUSY') queue.push(id)
          }
        }),
      )
      expect(queue).toEqual([])
    } finally {
      pressing = false
      await Promise.all(pressure)
    }
    // Some are refused (the pool is tiny); each refusal is BUSY, nothing else.
    for (const a of answers)
      if (a.applied === undefined) expect(a).toMatchObject({ status: 503, code: 'BUSY' })
    const appliedById = new Map<string, number>()
    for (const a of answers) if (a.applied === true) appliedById.set(a.id, (appliedById.get(a.id) ?? 0) + 1)
    const rows = await s.t.db.query<{ id: number; status: string }>(
      `SELECT id, status FROM event_run_steps WHERE id IN (${cueIds.map(() => '?').join(', ')})`,
      cueIds.map(Number),
    )
    const answered = rows.filter((r) => r.status === 'completed').map((r) => String(r.id))
    // A cue the database shows answered has exactly one answer that said applied: true …
    for (const id of answered) expect(appliedById.get(id), `cue ${id}`).toBe(1)
    // … and no answer said applied: true for a cue that was not answered.
    expect([...appliedById.keys()].every((id) => answered.includes(id))).toBe(true)
    console.log(
      `[pools] ${answers.length} answers: ${answers.filter((a) => a.applied === true).length} applied, ` +
        `${answers.filter((a) => a.applied === false).length} applied: false, ${answers.filter((a) => a.code === 'BUSY').length} BUSY`,
    )
  }, 90_000)
})
