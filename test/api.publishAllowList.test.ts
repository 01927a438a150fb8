/**
 * A `core.webhook` URL the WEBHOOK_ALLOW allow-list refuses is refused at
 * publish, by createDefinition, publishVersion and applyDefinitions alike:
 * BAD_USER_INPUT naming the allow-list and the step's path, nothing written.
 * URLs with placeholders are checked as far as they are written out; with an
 * empty allow-list every webhook is refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { unique } from './helpers/fixtures.ts'
import { startTestServer, type TestServer } from './helpers/server.ts'

let s: TestServer
let closed: TestServer
beforeAll(async () => {
  ;[s, closed] = await Promise.all([
    startTestServer({ env: { WEBHOOK_ALLOW: 'https://hooks.example.com/api/,http://127.0.0.1:9/' } }),
    startTestServer(),
  ])
})
afterAll(async () => {
  await Promise.all([s?.close(), closed?.close()])
})

const program = (url: string) => ({
  phases: [
    {
      name: 'main',
      steps: [
        { kind: 'core.log', params: { message: 'before' } },
        { kind: 'core.webhook', params: { url } },
      ],
    },
  ],
})

const CREATE = 'mutation ($input: CreateDefinitionInput!) { createDefinition(input: $input) { id slug } }'

async function create(server: TestServer, url: string) {
  const slug = unique('hook')
  const res = await server.gql<{ createDefinition: { id: string } }>(CREATE, {
    variables: { input: { slug, title: slug, program: program(url) } },
  })
  return { slug, res }
}

async function slugExists(server: TestServer, slug: string): Promise<boolean> {
  const res = await server.gql<{ definition: { id: string } | null }>(
    'query ($slug: String!) { definition(slug: $slug) { id } }',
    { variables: { slug } },
  )
  return res.body.data?.definition != null
}

describe('publish-time allow-list', () => {
  it('createDefinition refuses a URL outside the list, naming WEBHOOK_ALLOW and the path', async () => {
    const { slug, res } = await create(s, 'https://evil.example.net/collect')
    const err = res.body.errors?.[0]
    expect(err?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(err?.message).toContain('phases[0].steps[1].params.url')
    expect(err?.message).toContain('WEBHOOK_ALLOW')
    expect(err?.message).toContain('https://evil.example.net/collect')
    expect(await slugExists(s, slug)).toBe(false)
  })

  it('a prefix is matched at a boundary, as at run time', async () => {
    expect((await create(s, 'https://hooks.example.com/apix')).res.body.errors?.[0]?.message).toContain(
      'WEBHOOK_ALLOW',
    )
    expect((await create(s, 'https://HOOKS.example.com:443/api/x')).res.body.errors).toBeUndefined()
  })

  it('publishVersion refuses it, and the current version stays', async () => {
    const { res } = await create(s, 'https://hooks.example.com/api/ok')
    expect(res.body.errors).toBeUndefined()
    const id = res.body.data?.createDefinition.id as string
    const pub = await s.gql<{ publishVersion: { version: number } }>(
      'mutation ($id: ID!, $p: JSON!) { publishVersion(definitionId: $id, program: $p) { version } }',
      { variables: { id, p: program('http://127.0.0.1:8080/elsewhere') } },
    )
    expect(pub.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(pub.body.errors?.[0]?.message).toMatch(/phases\[0\]\.steps\[1\]\.params\.url: .*WEBHOOK_ALLOW/)
    const ok = await s.gql<{ publishVersion: { version: number } }>(
      'mutation ($id: ID!, $p: JSON!) { publishVersion(definitionId: $id, program: $p) { version } }',
      { variables: { id, p: program('http://127.0.0.1:9/fine') } },
    )
    expect(ok.body.errors).toBeUndefined()
    expect(ok.body.data?.publishVersion.version).toBe(2)
  })

  it('applyDefinitions refuses it with the manifest path, and applies nothing', async () => {
    const slug = unique('applied')
    const res = await s.gql('mutation ($m: JSON!) { applyDefinitions(manifests: $m) { applied } }', {
      variables: { m: [{ slug, title: slug, program: program('https://evil.example.net/') }] },
    })
    expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
    expect(res.body.errors?.[0]?.message).toContain('[0].program.phases[0].steps[1].params.url')
    expect(res.body.errors?.[0]?.message).toContain('WEBHOOK_ALLOW')
    expect(await slugExists(s, slug)).toBe(false)
  })

  it('placeholders: checked up to the first one; in the host only the scheme is checked', async () => {
    // In the path: the written part can still be allowed, or it cannot.
    expect((await create(s, 'https://hooks.example.com/api/{{params.path}}')).res.body.errors).toBeUndefined()
    const path = await create(s, 'https://hooks.example.com/other/{{params.path}}')
    expect(path.res.body.errors?.[0]?.message).toContain(
      'cannot be allowed by the webhook allow-list (WEBHOOK_ALLOW)',
    )
    // A secret in the query is a placeholder like any other.
    expect(
      (await create(s, 'https://hooks.example.com/api/x?token={{secret.HOOK_TOKEN}}')).res.body.errors,
    ).toBeUndefined()
    // In the host: the host is known only when the run renders it.
    expect((await create(s, 'https://{{params.host}}/x')).res.body.errors).toBeUndefined()
    const scheme = await create(s, 'ftp://{{params.host}}/x')
    expect(scheme.res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
  })

  it('an empty allow-list refuses every webhook at publish: webhooks are disabled', async () => {
    for (const url of ['https://hooks.example.com/api/x', 'https://{{params.host}}/x']) {
      const { res } = await create(closed, url)
      expect(res.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT')
      expect(res.body.errors?.[0]?.message).toMatch(/webhooks are disabled \(WEBHOOK_ALLOW is empty\)/)
    }
    // Programs without a webhook are not affected.
    const log = await closed.gql(CREATE, {
      variables: {
        input: {
          slug: unique('log'),
          title: 'log',
          program: { phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'x' } }] }] },
        },
      },
    })
    expect(log.body.errors).toBeUndefined()
  })
})
