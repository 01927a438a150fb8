import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { ConfigError, configSummary, generateToken, loadConfig } from '../src/config.ts'

const ADMIN = 'a'.repeat(20)
const VIEWER = 'v'.repeat(16)

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env)
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError)
    return (err as ConfigError).problems
  }
  throw new Error('expected a ConfigError')
}

describe('loadConfig', () => {
  it('applies the documented defaults to an empty environment', () => {
    const c = loadConfig({})
    expect(c).toMatchObject({
      port: 4000,
      host: '127.0.0.1',
      databaseUrl: undefined,
      tickMs: 1000,
      leaseMs: 30_000,
      runner: 'on',
      tokens: [],
      webhookAllow: [],
      maxBodyBytes: 1_048_576,
      logLevel: 'info',
      logRetentionDays: 30,
      runRetentionDays: 90,
      statusPollMs: 500,
      fanoutDeliveriesPerPoll: 20_000,
      fanoutDeliveriesPerSecond: 2000,
      materialiseHorizonHours: 24,
      warnings: [],
    })
    expect(c.instanceId).toMatch(new RegExp(`-${process.pid}-[0-9a-f]{4}$`))
    expect(loadConfig({}).instanceId).not.toBe(c.instanceId)
  })

  it('paces the runChanges fan-out by default only where a runner shares the CPU', () => {
    expect(loadConfig({}).fanoutDeliveriesPerSecond).toBe(2000)
    expect(loadConfig({ RUNNER: 'off' }).fanoutDeliveriesPerSecond).toBe(0)
    expect(loadConfig({ RUNNER: 'off', FANOUT_DELIVERIES_PER_SECOND: '500' }).fanoutDeliveriesPerSecond).toBe(
      500,
    )
    expect(loadConfig({ FANOUT_DELIVERIES_PER_SECOND: '0' }).fanoutDeliveriesPerSecond).toBe(0)
    expect(() => loadConfig({ FANOUT_DELIVERIES_PER_SECOND: '-5' })).toThrow(/FANOUT_DELIVERIES_PER_SECOND/)
    expect(() => loadConfig({ FANOUT_DELIVERIES_PER_SECOND: 'lots' })).toThrow(/FANOUT_DELIVERIES_PER_SECOND/)
  })

  it('reads every variable', () => {
    const c = loadConfig({
      PORT: '8080',
      HOST: '10.0.0.5',
      DATABASE_URL: 'mysql://u:p@db:3306/showrunner',
      TICK_MS: '250',
      LEASE_MS: '5000',
      RUNNER: 'OFF',
      SHOWRUNNER_TOKENS: `admin:${ADMIN}, viewer:${VIEWER},`,
      WEBHOOK_ALLOW: 'https://Hooks.Example.com:443/x, http://127.0.0.1:8080',
      MAX_BODY_BYTES: '2048',
      LOG_LEVEL: 'debug',
      LOG_RETENTION_DAYS: '7',
      RUN_RETENTION_DAYS: '0',
      STATUS_POLL_MS: '100',
      FANOUT_DELIVERIES_PER_SECOND: '750',
      MATERIALIZE_HORIZON_HOURS: '48',
      INSTANCE_ID: 'node-a',
    })
    expect(c).toMatchObject({
      port: 8080,
      host: '10.0.0.5',
      databaseUrl: 'mysql://u:p@db:3306/showrunner',
      tickMs: 250,
      leaseMs: 5000,
      runner: 'off',
      maxBodyBytes: 2048,
      logLevel: 'debug',
      logRetentionDays: 7,
      runRetentionDays: 0,
      statusPollMs: 100,
      fanoutDeliveriesPerSecond: 750,
      materialiseHorizonHours: 48,
      instanceId: 'node-a',
      warnings: [],
    })
    expect(c.webhookAllow).toEqual(['https://hooks.example.com/x', 'http://127.0.0.1:8080/'])
    const hash8 = (t: string) => createHash('sha256').update(t).digest('hex').slice(0, 8)
    expect(c.tokens).toEqual([
      {
        role: 'admin',
        token: ADMIN,
        actor: `admin#${hash8(ADMIN)}`,
        name: `admin#${hash8(ADMIN)}`,
        teams: [],
        source: 'token',
      },
      {
        role: 'viewer',
        token: VIEWER,
        actor: `viewer#${hash8(VIEWER)}`,
        name: `viewer#${hash8(VIEWER)}`,
        teams: [],
        source: 'token',
      },
    ])
  })

  it('treats blank variables as unset', () => {
    const c = loadConfig({ PORT: '', TICK_MS: '  ', SHOWRUNNER_TOKENS: '', WEBHOOK_ALLOW: ' , ' })
    expect(c.port).toBe(4000)
    expect(c.tickMs).toBe(1000)
    expect(c.tokens).toEqual([])
    expect(c.webhookAllow).toEqual([])
  })

  it('binds 0.0.0.0 by default when tokens are configured', () => {
    expect(loadConfig({ SHOWRUNNER_TOKENS: `admin:${ADMIN}` }).host).toBe('0.0.0.0')
  })

  it('binds 127.0.0.1 without tokens even when HOST says otherwise, with a warning', () => {
    const c = loadConfig({ HOST: '0.0.0.0' })
    expect(c.host).toBe('127.0.0.1')
    expect(c.warnings).toHaveLength(1)
    expect(c.warnings[0]).toMatch(/HOST=0\.0\.0\.0 ignored.*SHOWRUNNER_TOKENS/)
    expect(loadConfig({ HOST: '127.0.0.1' }).warnings).toEqual([])
  })

  it('names the variable and the value in each message', () => {
    expect(problemsOf({ TICK_MS: 'abc' })).toEqual([
      "TICK_MS must be a whole number of milliseconds ≥ 10 (got 'abc')",
    ])
    expect(problemsOf({ PORT: '70000' })[0]).toBe("PORT must be a whole number from 0 to 65535 (got '70000')")
    expect(problemsOf({ PORT: '1.5' })[0]).toMatch(/^PORT .*'1\.5'/)
    expect(problemsOf({ TICK_MS: '5' })[0]).toMatch(/^TICK_MS .*'5'/)
    expect(problemsOf({ RUNNER: 'yes' })[0]).toBe("RUNNER must be one of 'on', 'off' (got 'yes')")
    expect(problemsOf({ LOG_LEVEL: 'verbose' })[0]).toMatch(
      /^LOG_LEVEL must be one of 'trace'.*\(got 'verbose'\)/,
    )
    expect(problemsOf({ MAX_BODY_BYTES: '-1' })[0]).toMatch(/^MAX_BODY_BYTES /)
    expect(problemsOf({ LOG_RETENTION_DAYS: '0' })[0]).toMatch(/^LOG_RETENTION_DAYS /)
    expect(problemsOf({ RUN_RETENTION_DAYS: '-1' })[0]).toMatch(/^RUN_RETENTION_DAYS .*0 keeps every run/)
    expect(problemsOf({ RUN_RETENTION_DAYS: 'ninety' })[0]).toMatch(/^RUN_RETENTION_DAYS /)
    expect(problemsOf({ STATUS_POLL_MS: 'x' })[0]).toMatch(/^STATUS_POLL_MS /)
    expect(problemsOf({ MATERIALIZE_HORIZON_HOURS: '0' })[0]).toMatch(/^MATERIALIZE_HORIZON_HOURS /)
    expect(problemsOf({ INSTANCE_ID: 'has space' })[0]).toMatch(/^INSTANCE_ID /)
    expect(problemsOf({ INSTANCE_ID: 'x'.repeat(101) })[0]).toMatch(/^INSTANCE_ID /)
    expect(problemsOf({ RUNNER_BATCH_SIZE: '0' })[0]).toBe(
      "RUNNER_BATCH_SIZE must be a whole number from 1 to 10000 (got '0')",
    )
    expect(problemsOf({ RUNNER_PARALLELISM: 'many' })[0]).toMatch(/^RUNNER_PARALLELISM .*'many'/)
    expect(problemsOf({ RUNNER_START_CONCURRENCY: '65' })[0]).toMatch(/^RUNNER_START_CONCURRENCY /)
    expect(problemsOf({ RUNNER_WAKE_BATCHES: '257' })[0]).toMatch(/^RUNNER_WAKE_BATCHES /)
    expect([
      loadConfig({}).runnerWakeBatches,
      loadConfig({ RUNNER_WAKE_BATCHES: '0' }).runnerWakeBatches,
    ]).toEqual([16, 0])
    expect(problemsOf({ DB_POOL_SIZE: '0' })[0]).toMatch(/^DB_POOL_SIZE /)
  })

  it('reads the runner and pool sizes, with the shipped defaults when unset', () => {
    const d = loadConfig({})
    expect([d.runnerBatchSize, d.runnerParallelism, d.runnerStartConcurrency, d.dbPoolSize]).toEqual([
      2000, 32, 4, 10,
    ])
    const c = loadConfig({
      RUNNER_BATCH_SIZE: '1000',
      RUNNER_PARALLELISM: '16',
      RUNNER_START_CONCURRENCY: '3',
      DB_POOL_SIZE: '20',
    })
    expect([c.runnerBatchSize, c.runnerParallelism, c.runnerStartConcurrency, c.dbPoolSize]).toEqual([
      1000, 16, 3, 20,
    ])
  })

  it('requires LEASE_MS to exceed TICK_MS', () => {
    expect(problemsOf({ TICK_MS: '1000', LEASE_MS: '1000' })).toEqual([
      'LEASE_MS (1000) must be greater than TICK_MS (1000)',
    ])
    expect(problemsOf({ TICK_MS: '40000' })[0]).toMatch(/LEASE_MS \(30000\).*TICK_MS \(40000\)/)
  })

  it('lists every problem at once', () => {
    const problems = problemsOf({ PORT: 'x', TICK_MS: 'y', RUNNER: 'maybe', WEBHOOK_ALLOW: 'ftp://x' })
    expect(problems.map((p) => p.split(' ')[0])).toEqual(['PORT', 'TICK_MS', 'RUNNER', 'WEBHOOK_ALLOW'])
    expect(() => loadConfig({ PORT: 'x', TICK_MS: 'y' })).toThrow(
      /^Invalid configuration:\n {2}- PORT.*\n {2}- TICK_MS/,
    )
  })

  describe('SHOWRUNNER_TOKENS', () => {
    it('rejects unknown roles, empty tokens, missing roles and duplicates without echoing tokens', () => {
      const secret = 'supersecretvalue1'
      const problems = problemsOf({
        SHOWRUNNER_TOKENS: [`root:${ADMIN}`, 'admin:', secret, `viewer:${VIEWER}`, `admin:${VIEWER}`].join(
          ',',
        ),
      })
      expect(problems).toEqual([
        "SHOWRUNNER_TOKENS entry 1 has unknown role 'root' (roles: viewer, operator, admin)",
        'SHOWRUNNER_TOKENS entry 2 has an empty token (expected e.g. admin:<token>)',
        'SHOWRUNNER_TOKENS entry 3 is not role:token (expected e.g. admin:<token>)',
        'SHOWRUNNER_TOKENS entries 4 and 5 use the same token; each token must be distinct',
      ])
      for (const p of problems) {
        expect(p).not.toContain(secret)
        expect(p).not.toContain(VIEWER)
        expect(p).not.toContain('short')
      }
    })

    it('accepts a short token with a warning that names its actor, never the token', () => {
      const c = loadConfig({ SHOWRUNNER_TOKENS: 'admin:letmein,viewer:' + 'v'.repeat(20) })
      expect(c.tokens.map((t) => t.role)).toEqual(['admin', 'viewer'])
      expect(c.warnings).toHaveLength(1)
      expect(c.warnings[0]).toMatch(/the admin token admin#[0-9a-f]{8} is only 7 characters; use at least 16/)
      expect(c.warnings[0]).not.toContain('letmein')
    })

    it('names an entry written role:name=token, and leaves role:token (padding included) as it was', () => {
      const c = loadConfig({
        SHOWRUNNER_TOKENS: [
          `admin:Stage Manager=${ADMIN}`,
          `viewer:${VIEWER}`,
          `operator:${'p'.repeat(20)}==`,
          `operator:ci-bot@example.com=${'c'.repeat(20)}`,
          `viewer:not/aname=${'n'.repeat(20)}`,
        ].join(','),
      })
      expect(c.tokens.map((t) => [t.role, t.name, t.token])).toEqual([
        ['admin', 'Stage Manager', ADMIN],
        ['viewer', `viewer#${createHash('sha256').update(VIEWER).digest('hex').slice(0, 8)}`, VIEWER],
        ['operator', expect.stringMatching(/^operator#[0-9a-f]{8}$/), `${'p'.repeat(20)}==`],
        ['operator', 'ci-bot@example.com', 'c'.repeat(20)],
        ['viewer', expect.stringMatching(/^viewer#[0-9a-f]{8}$/), `not/aname=${'n'.repeat(20)}`],
      ])
      expect(c.tokens.every((t) => t.actor === t.name)).toBe(true)
    })

    it('accepts upper-case roles and tokens containing colons', () => {
      const c = loadConfig({ SHOWRUNNER_TOKENS: `Operator:${'x'.repeat(10)}:${'y'.repeat(10)}` })
      expect(c.tokens[0]?.role).toBe('operator')
      expect(c.tokens[0]?.token).toBe(`${'x'.repeat(10)}:${'y'.repeat(10)}`)
    })
  })

  describe('WEBHOOK_ALLOW', () => {
    it('rejects non-http(s), relative URLs, credentials and fragments', () => {
      const problems = problemsOf({
        WEBHOOK_ALLOW:
          'ftp://files.example.com/,hooks.example.com,https://u:p@x.example/,https://x.example/#a',
      })
      expect(problems).toEqual([
        "WEBHOOK_ALLOW entry 'ftp://files.example.com/' must use http or https (got ftp)",
        "WEBHOOK_ALLOW entry 'hooks.example.com' is not an absolute URL (expected e.g. https://hooks.example.com/)",
        "WEBHOOK_ALLOW entry 'https://u:p@x.example/' must not carry credentials; put them in the step headers",
        "WEBHOOK_ALLOW entry 'https://x.example/#a' must not have a #fragment",
      ])
    })

    it('deduplicates normalised prefixes', () => {
      const c = loadConfig({ WEBHOOK_ALLOW: 'http://A.example:80,http://a.example/' })
      expect(c.webhookAllow).toEqual(['http://a.example/'])
    })
  })

  it('rejects a DATABASE_URL that is not mysql:// without echoing it', () => {
    const problems = problemsOf({ DATABASE_URL: 'postgres://u:hunter2@h/db' })
    expect(problems).toEqual(['DATABASE_URL must look like mysql://user:pass@host:3306/db (got postgres:)'])
  })

  it('accepts several hosts of one cluster in DATABASE_URL', () => {
    const c = loadConfig({ DATABASE_URL: 'mysql://root@127.0.0.1:3311,127.0.0.1:3312,db3/showrunner' })
    expect(c.databaseUrl).toBe('mysql://root@127.0.0.1:3311,127.0.0.1:3312,db3/showrunner')
  })

  it('says which host of a DATABASE_URL list is wrong, never echoing the password', () => {
    for (const [url, want] of [
      ['mysql://u:hunter2@h1:3306,,h2/db', /host list has an empty entry \(number 2\)/],
      ['mysql://u:hunter2@h1:3306,h2:99999/db', /host "h2:99999" is not host or host:port/],
      ['mysql://u:hunter2@h1,h1:3306/db', /names the same host:port twice/],
      ['mysql://u:hunter2@h1,h2/db?socket=/tmp/s.sock', /several hosts and a unix socket/],
    ] as const) {
      const problems = problemsOf({ DATABASE_URL: url })
      expect(problems).toHaveLength(1)
      expect(problems[0]).toMatch(/^DATABASE_URL/)
      expect(problems[0]).toMatch(want)
      expect(problems[0]).not.toContain('hunter2')
    }
  })
})

describe('request limits and pools', () => {
  it('default to the documented values', () => {
    expect(loadConfig({})).toMatchObject({
      limits: {
        maxDepth: 10,
        maxCost: 20_000,
        maxAliases: 30,
        maxTokens: 2000,
        maxOccurrences: 2000,
        wsMaxSubscriptions: 100,
        wsInitTimeoutMs: 3000,
      },
      dbPoolSize: 10,
      dbQueueLimit: 100,
      runnerDbPoolSize: 8,
    })
  })

  it('are read from their variables', () => {
    const c = loadConfig({
      MAX_QUERY_DEPTH: '12',
      MAX_QUERY_COST: '50000',
      MAX_QUERY_ALIASES: '100',
      MAX_QUERY_TOKENS: '5000',
      MAX_OCCURRENCES_PER_REQUEST: '10000',
      WS_MAX_SUBSCRIPTIONS: '500',
      WS_INIT_TIMEOUT_MS: '10000',
      SUBSCRIPTIONS_PER_PRINCIPAL: '50',
      SUBSCRIPTIONS_PER_INSTANCE: '800',
      DB_POOL_SIZE: '20',
      DB_QUEUE_LIMIT: '1000',
      RUNNER_DB_POOL_SIZE: '8',
    })
    expect(c.limits).toEqual({
      maxDepth: 12,
      maxCost: 50_000,
      maxAliases: 100,
      maxTokens: 5000,
      maxOccurrences: 10_000,
      wsMaxSubscriptions: 500,
      wsInitTimeoutMs: 10_000,
      subscriptionsPerPrincipal: 50,
      subscriptionsPerInstance: 800,
      maxAnswerBytes: 16 * 1024 * 1024,
      maxParamsBytes: 64 * 1024,
    })
    expect(c).toMatchObject({ dbPoolSize: 20, dbQueueLimit: 1000, runnerDbPoolSize: 8 })
  })

  it('refuse nonsense, naming each variable', () => {
    const problems = (() => {
      try {
        loadConfig({ MAX_QUERY_TOKENS: '10', WS_MAX_SUBSCRIPTIONS: '0', MAX_QUERY_COST: 'lots' })
      } catch (err) {
        return (err as ConfigError).problems
      }
      return []
    })()
    expect(problems).toEqual([
      "MAX_QUERY_COST must be a whole number from 10 to 10000000 (got 'lots')",
      "MAX_QUERY_TOKENS must be a whole number from 100 to 1000000 (got '10')",
      "WS_MAX_SUBSCRIPTIONS must be a whole number from 1 to 100000 (got '0')",
    ])
  })
})

describe('generateToken', () => {
  it('makes distinct 43-character base64url tokens that loadConfig accepts', () => {
    const a = generateToken()
    const b = generateToken()
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(a).not.toBe(b)
    expect(loadConfig({ SHOWRUNNER_TOKENS: `admin:${a}` }).tokens).toHaveLength(1)
  })
})

describe('configSummary', () => {
  it('keeps secrets out of the start-up log', () => {
    const c = loadConfig({ SHOWRUNNER_TOKENS: `admin:${ADMIN}`, DATABASE_URL: 'mysql://u:hunter2@db/x' })
    const text = JSON.stringify(configSummary(c))
    expect(text).not.toContain(ADMIN)
    expect(text).not.toContain('hunter2')
    expect(text).toContain(c.tokens[0]!.actor)
  })

  it('hides the password of a multi-host DATABASE_URL', () => {
    const c = loadConfig({ DATABASE_URL: 'mysql://u:hunter2@h1:3306,h2:3306/x' })
    expect(configSummary(c).databaseUrl).toBe('mysql://u:***@h1:3306,h2:3306/x')
  })
})

describe('bounds per principal (answer size, params size, runs per minute, audit retention)', () => {
  it('default to the documented values', () => {
    const c = loadConfig({})
    expect(c.limits.maxAnswerBytes).toBe(16 * 1024 * 1024)
    expect(c.limits.maxParamsBytes).toBe(64 * 1024)
    expect(c.maxRunsPerMinute).toBe(10_000)
    expect(c.auditRetentionDays).toBe(90)
  })

  it('are read from their variables', () => {
    const c = loadConfig({
      MAX_ANSWER_BYTES: '1048576',
      MAX_PARAMS_BYTES: '1024',
      MAX_RUNS_PER_MINUTE: '50',
      AUDIT_RETENTION_DAYS: '0',
    })
    expect(c.limits.maxAnswerBytes).toBe(1_048_576)
    expect(c.limits.maxParamsBytes).toBe(1024)
    expect(c.maxRunsPerMinute).toBe(50)
    expect(c.auditRetentionDays).toBe(0)
  })

  it('refuses bad values, naming each variable', () => {
    const problems = problemsOf({
      MAX_ANSWER_BYTES: '10',
      MAX_PARAMS_BYTES: 'lots',
      MAX_RUNS_PER_MINUTE: '0',
      AUDIT_RETENTION_DAYS: '-1',
    })
    expect(problems).toHaveLength(4)
    expect(problems.join('\n')).toMatch(/MAX_ANSWER_BYTES must be a whole number of bytes from 65536/)
    expect(problems.join('\n')).toMatch(/MAX_PARAMS_BYTES must be/)
    expect(problems.join('\n')).toMatch(/MAX_RUNS_PER_MINUTE must be/)
    expect(problems.join('\n')).toMatch(/AUDIT_RETENTION_DAYS must be/)
  })
})
