/**
 * The HTTP side of bench/showtimeClients.ts: a POST on a given agent (or on a
 * connection of its own), and `resolveCue` with its answer read.
 */
import { type Agent as HttpAgent, request } from 'node:http'

export interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

export function post(url: URL, token: string, body: string, agent: HttpAgent | false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        agent,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          accept: 'application/graphql-response+json, application/json',
          'content-length': Buffer.byteLength(body),
          ...(agent === false ? { connection: 'close' } : {}),
        },
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d) => {
          text += d
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }))
        res.on('error', reject)
      },
    )
    req.setTimeout(30_000, () => req.destroy(new Error('timeout after 30 s')))
    req.on('error', reject)
    req.end(body)
  })
}

const RESOLVE = 'mutation Go($id: ID!) { resolveCue(stepId: $id) { applied } }'

export interface ResolveAnswer extends Answer {
  applied: boolean | null
  code: string | null
}

export async function resolveCue(
  graphqlUrl: URL,
  token: string,
  stepId: string,
  agent: HttpAgent | false,
): Promise<ResolveAnswer> {
  const a = await post(
    graphqlUrl,
    token,
    JSON.stringify({ query: RESOLVE, variables: { id: stepId } }),
    agent,
  )
  let applied: boolean | null = null
  let code: string | null = null
  try {
    const parsed = JSON.parse(a.body) as {
      data?: { resolveCue?: { applied: boolean } } | null
      errors?: { extensions?: { code?: string } }[]
    }
    applied = parsed.data?.resolveCue?.applied ?? null
    code = parsed.errors?.[0]?.extensions?.code ?? null
  } catch {
    code = `unparsable body (HTTP ${a.status})`
  }
  return { ...a, applied, code }
}
