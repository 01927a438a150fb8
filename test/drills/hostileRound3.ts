/**
 * The third round of hostile input, as cases the hostile drill sends against a
 * real server process (test/drills/hostile.drill.ts): each HIGH and MED
 * finding reproduced, with what closing it means.
 *
 * - HIGH 1, heavy answers: the steps of 500 runs of a 1,000-step program,
 *   aliased thrice, and 30 aliases of 100 runs' megabyte params (rows stored
 *   as an older server could), six at once: refused before they are built; the
 *   server's peak RSS stays bounded. A megabyte of params is refused.
 * - HIGH 2, the truncation edge: a receiver echoing padding then the secret,
 *   so it straddles the result's 2 KiB cut and the error's 200-character cut:
 *   no start of the secret in any answer.
 * - MED 3, joined placeholders: `{{params.a}}{{params.b}}`, `{{run.scope}}`
 *   with `{{params.n}}`, `{{{params.x}}}`: the receiver never gets the secret.
 * - MED 4, one principal filling the database: backfills past
 *   MAX_RUNS_PER_MINUTE answer RATE_LIMITED with when to retry.
 */
import { readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Db } from '../../sql/db.ts'
import { postGql, type ServerProcess, sleep, TOKENS } from './lib.ts'

/** A receiver: /pad?n=N&status=S answers N dots then the Authorization header and body; every request is kept. */
export async function startEchoReceiver(): Promise<{ server: Server; origin: string; seen: string[] }> {
  const seen: string[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString()
      seen.push(`${req.url} ${JSON.stringify(req.headers)} ${body}`)
      const url = new URL(req.url ?? '/', 'http://x')
      const n = Number(url.searchParams.get('n') ?? 0)
      res.writeHead(Number(url.searchParams.get('status') ?? 200), { 'content-type': 'text/plain' })
      res.end(`${'.'.repeat(n)}${req.headers.authorization ?? ''} ${body}`)
    })
  })
  server.listen(0, '127.0.0.1')
  await new Promise((r) => server.once('listening', r))
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
}

/** The peak resident set of a process so far (VmHWM), in MB. */
export function peakRssMb(pid: number): number {
  const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
  return Math.round(Number(kb) / 1024)
}

const aliased = (n: number, field: string) =>
  `{ ${Array.from({ length: n }, (_, i) => `a${i}: ${field}`).join(' ')} }`

async function define(s: ServerProcess, slug: string, program: unknown, schedule = false): Promise<string> {
  const res = await postGql<{ createDefinition: { id: string } }>(s.url, {
    query: `mutation ($p: JSON!) { createDefinition(input: { slug: "${slug}", title: "${slug}", ${schedule ? 'schedule: "0 0 1 1 *", ' : ''}program: $p }) { id } }`,
    variables: { p: program },
  })
  const id = res.body?.data?.createDefinition.id
  if (!id) throw new Error(`createDefinition ${slug}: ${JSON.stringify(res.body).slice(0, 300)}`)
  return id
}

async function start(s: ServerProcess, d: string, extra = ''): Promise<string> {
  const res = await postGql<{ startRun: { id: string } }>(
    s.url,
    { query: `mutation { startRun(definitionId: "${d}"${extra}) { id } }` },
    { token: TOKENS.operator },
  )
  const id = res.body?.data?.startRun.id
  if (!id) throw new Error(`startRun: ${JSON.stringify(res.body).slice(0, 300)}`)
  return id
}

async function settled(s: ServerProcess, runId: string): Promise<string> {
  for (let i = 0; i < 400; i++) {
    const res = await postGql<{ run: unknown }>(s.url, {
      query: `{ run(id: "${runId}") { status lastError steps { status lastError result } logs(limit: 200) { message data } } }`,
    })
    const text = JSON.stringify(res.body)
    if (/"status":"(COMPLETED|FAILED|CANCELLED)"/.test(text.slice(0, 40))) return text
    await sleep(50)
  }
  throw new Error(`run ${runId} did not finish`)
}

/** Every start of `secret` from 4 characters on that occurs in `text`. */
function partsOf(secret: string, text: string): string[] {
  const out: string[] = []
  for (let k = 4; k <= secret.length; k++) if (text.includes(secret.slice(0, k))) out.push(secret.slice(0, k))
  return out
}

export interface RoundThree {
  figures: Record<string, unknown>
  problems: string[]
}

export async function roundThree(
  s: ServerProcess,
  db: Db,
  receiver: { origin: string; seen: string[] },
  secret: string,
): Promise<RoundThree> {
  const problems: string[] = []
  const figures: Record<string, unknown> = {}
  const check = (ok: boolean, what: string) => {
    if (!ok) problems.push(what)
  }

  // HIGH 1: heavy answers, six at once.
  const bigProgram = {
    phases: [
      {
        name: 'main',
        steps: Array.from({ length: 1000 }, (_, i) => ({ kind: 'core.log', params: { message: `s${i}` } })),
      },
    ],
  }
  // Yearly, so a backfill can ask for many occurrences while nothing comes due during the drill.
  const heavy = await define(s, 'heavy', bigProgram, true)
  const tooBig = await postGql(
    s.url,
    {
      query: 'mutation ($d: ID!, $p: JSON) { startRun(definitionId: $d, params: $p) { id } }',
      variables: { d: heavy, p: { pad: 'x'.repeat(1024 * 1024) } },
    },
    { token: TOKENS.operator },
  )
  check(
    tooBig.body?.errors?.[0]?.extensions?.code === 'BAD_USER_INPUT',
    `1 MB params → ${tooBig.text || JSON.stringify(tooBig.body).slice(0, 200)}`,
  )
  for (let i = 0; i < 30; i++)
    await start(s, heavy, `, at: "2030-01-01T00:${String(i).padStart(2, '0')}:00Z"`)
  await db.execute(`UPDATE event_runs SET params = JSON_OBJECT('pad', REPEAT('x', ?))`, [1024 * 1024])
  const rssBefore = peakRssMb(s.pid)
  const shapes = [
    aliased(3, `runs(definitionId: ${heavy}, limit: 500) { steps { id kind status params } }`),
    aliased(30, 'runs(limit: 100) { params }'),
    // Just over the 16 MB cap: the estimate passes it (17 × 64 KB), the data does not.
    '{ runs(limit: 17) { id params } }',
  ]
  const answers = await Promise.all(
    Array.from({ length: 6 }, (_, i) =>
      postGql(s.url, { query: shapes[i % 3] as string }, { token: TOKENS.viewer, timeoutMs: 30_000 }),
    ),
  )
  for (const [i, a] of answers.entries()) {
    const codes = (a.body?.errors ?? []).map((e) => e.extensions?.code)
    check(codes.includes('ANSWER_TOO_LARGE'), `heavy answer ${i % 3} → ${a.status} ${JSON.stringify(codes)}`)
    check(a.ms < 5000, `heavy answer ${i % 3} took ${a.ms} ms`)
  }
  figures.heavy = {
    answers: answers.map((a) => ({ status: a.status, ms: a.ms })),
    peakRssMbBefore: rssBefore,
    peakRssMbAfter: peakRssMb(s.pid),
  }
  check(peakRssMb(s.pid) < 1024, `peak RSS ${peakRssMb(s.pid)} MB after six heavy requests`)

  // HIGH 2: the secret straddles each cut.
  const pad = (n: number, status: number) => ({
    kind: 'core.webhook',
    retry: { attempts: 1 },
    onError: 'degrade',
    params: {
      url: `${receiver.origin}/pad?n=${n}&status=${status}`,
      headers: { Authorization: 'Bearer {{secret.HOOK}}' },
      body: '{{secret.HOOK}}',
    },
  })
  const edges = await define(s, 'edges', {
    phases: [
      {
        name: 'main',
        steps: [2030, 2038, 2040, 2044]
          .map((n) => pad(n, 200))
          .concat([180, 190, 192].map((n) => pad(n, 400))),
      },
    ],
  })
  const edgeAnswer = await settled(s, await start(s, edges))
  check(
    partsOf(secret, edgeAnswer).length === 0,
    `part of the secret at a cut: ${partsOf(secret, edgeAnswer).at(-1)?.length} characters`,
  )
  check(edgeAnswer.includes('answered HTTP 400'), 'the padded receiver never refused')

  // MED 3: joined placeholders.
  const before = receiver.seen.length
  const joined = await define(s, 'joined', {
    phases: [
      {
        name: 'main',
        steps: [
          {
            kind: 'core.webhook',
            retry: { attempts: 1 },
            params: { url: `${receiver.origin}/echo?q={{params.a}}{{params.b}}`, method: 'GET' },
          },
          {
            kind: 'core.webhook',
            retry: { attempts: 1 },
            params: { url: `${receiver.origin}/scope`, body: { s: '{{run.scope}}{{params.n}}' } },
          },
          {
            kind: 'core.webhook',
            retry: { attempts: 1 },
            params: { url: `${receiver.origin}/x`, headers: { 'X-Echo': '{{{params.x}}}' } },
          },
        ],
      },
    ],
  })
  const joinedRun = await postGql<{ startRun: { id: string } }>(
    s.url,
    {
      query: 'mutation ($d: ID!, $p: JSON) { startRun(definitionId: $d, scope: "{", params: $p) { id } }',
      variables: { d: joined, p: { a: '{', b: '{secret.HOOK}}', n: '{secret.HOOK}}', x: '{secret.HOOK}' } },
    },
    { token: TOKENS.operator },
  )
  await settled(s, joinedRun.body?.data?.startRun.id as string)
  const sent = receiver.seen.slice(before).join('\n')
  check(
    receiver.seen.length - before === 3,
    `joined placeholders: ${receiver.seen.length - before} requests, not 3`,
  )
  check(!sent.includes(secret), 'joined placeholders sent the secret')

  // MED 4: runs per principal per minute.
  const backfills: string[] = []
  for (let i = 0; i < 4; i++) {
    const b = await postGql(
      s.url,
      {
        query: `mutation ($d: ID!, $s: [String!]) { backfillRuns(definitionId: $d, from: "2040-01-01T00:00:00Z", to: "2050-01-01T00:00:00Z", scopes: $s) { created } }`,
        // 10 years × 100 scopes: 1,000 runs a call.
        variables: { d: heavy, s: Array.from({ length: 100 }, (_, j) => `b${i}-${j}`) },
      },
      { token: TOKENS.operator },
    )
    const e = b.body?.errors?.[0]
    backfills.push(e ? `${e.extensions?.code} retry ${e.extensions?.retryAfterSeconds}` : 'ok')
  }
  figures.backfills = backfills
  check(backfills.includes('ok'), `no backfill was allowed: ${backfills.join(', ')}`)
  check(
    backfills.some((b) => /^RATE_LIMITED retry \d+$/.test(b)),
    `no backfill was rate limited: ${backfills.join(', ')}`,
  )
  return { figures, problems }
}
