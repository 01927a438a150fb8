/**
 * The document generator behind the bad-input fuzz drill (fuzz.drill.ts).
 *
 * It walks the real schema (introspected from the running server) and builds,
 * for a root field, a well-formed GraphQL document: arguments inline or through
 * variables, a selection set that may go deep (up to and just past the depth
 * limit), aliases and inline fragments. The shapes are valid; the values are
 * hostile: numbers out of range or NaN, enormous and odd strings, unicode,
 * SQL-looking text, template syntax, bad ids and date-times, JSON bombs (deep,
 * wide, huge) within the body limit, programs with every parameter wrong, and
 * variables whose JSON type does not match what they are declared as.
 *
 * Deterministic for a seed (mulberry32), so a failing case can be replayed.
 */
import {
  type GraphQLArgument,
  type GraphQLField,
  type GraphQLInputType,
  type GraphQLNamedType,
  type GraphQLObjectType,
  type GraphQLSchema,
  getNamedType,
  isEnumType,
  isInputObjectType,
  isListType,
  isNonNullType,
  isObjectType,
  isScalarType,
} from 'graphql'

// ── Randomness ───────────────────────────────────────────────────────────

export type Rng = () => number

export function mulberry32(seed: number): Rng {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng() * items.length)] as T
const chance = (rng: Rng, p: number) => rng() < p
const int = (rng: Rng, lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1))

// ── Values ───────────────────────────────────────────────────────────────

/** A value with its own text in each syntax: deep nesting and numbers JS cannot hold. */
class Raw {
  constructor(
    readonly json: string,
    readonly gql: string,
  ) {}
}
/** An enum value: bare in a document, a string in variables. */
class EnumValue {
  constructor(readonly name: string) {}
}
type Value = null | boolean | number | string | Raw | EnumValue | Value[] | { [k: string]: Value }

const GQL_NAME = /^[_A-Za-z][_0-9A-Za-z]*$/

/** GraphQL literal syntax. */
export function printLiteral(v: Value): string {
  if (v === null) return 'null'
  if (v instanceof Raw) return v.gql
  if (v instanceof EnumValue) return v.name
  if (typeof v === 'string') return JSON.stringify(v)
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : 'NaN'
  if (typeof v === 'boolean') return String(v)
  if (Array.isArray(v)) return `[${v.map(printLiteral).join(', ')}]`
  return `{${Object.entries(v)
    .filter(([k]) => GQL_NAME.test(k))
    .map(([k, x]) => `${k}: ${printLiteral(x)}`)
    .join(', ')}}`
}

/** JSON text (variables). */
export function printJson(v: Value): string {
  if (v === null) return 'null'
  if (v instanceof Raw) return v.json
  if (v instanceof EnumValue) return JSON.stringify(v.name)
  if (typeof v === 'number') return Number.isFinite(v) ? JSON.stringify(v) : 'null'
  if (typeof v !== 'object') return JSON.stringify(v)
  if (Array.isArray(v)) return `[${v.map(printJson).join(',')}]`
  return `{${Object.entries(v)
    .map(([k, x]) => `${JSON.stringify(k)}:${printJson(x)}`)
    .join(',')}}`
}

const deepArray = (d: number) => new Raw('['.repeat(d) + ']'.repeat(d), '['.repeat(d) + ']'.repeat(d))
const deepObject = (d: number) =>
  new Raw('{"a":'.repeat(d) + '1' + '}'.repeat(d), '{a: '.repeat(d) + '1' + '}'.repeat(d))

const SQLISH = [
  "' OR '1'='1",
  "1' OR 1=1 --",
  '1; DROP TABLE event_runs; --',
  "'; SELECT SLEEP(5); --",
  "' UNION SELECT user, password FROM mysql.user --",
  '" OR ""="',
  "\\'; DELETE FROM event_definitions WHERE '1'='1",
  '0x27',
  "%' AND 1=0 UNION ALL SELECT NULL, @@version #",
  '`; SHOW TABLES; `',
]
const UNICODE = [
  '😀'.repeat(64),
  '\u202eevil\u202c',
  'a\u200db\u200cc',
  '\u0000',
  'nul\u0000in\u0000middle',
  '\ud800',
  '\udfff\ud800',
  'e\u0301\u0301\u0301\u0301',
  '\ufeffbom',
  'line\r\nbreak\ttab',
  'Ω≈ç√∫˜µ≤≥÷',
  '𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  '\u00a0\u2028\u2029',
  'Ｆｕｌｌｗｉｄｔｈ１２３',
  'ß'.repeat(200),
]
const ODD = [
  '',
  ' ',
  '   padded   ',
  '{{run.scope}}',
  '{{params.__proto__}}',
  '{{constructor.constructor}}',
  '{{',
  '}}{{',
  '{{ definition.title }}{{run.id}}',
  '../../../../etc/passwd',
  '/work/main/src/server.ts',
  'C:\\Windows\\System32',
  '%s%s%s%n',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a template-injection probe, on purpose
  '${7*7}',
  '<script>alert(1)</script>',
  '__proto__',
  'constructor',
  'null',
  'undefined',
  'NaN',
  'true',
  '-0',
  '\\',
  '"',
  "'",
  'http://169.254.169.254/latest/meta-data/',
  'file:///etc/passwd',
  'javascript:alert(1)',
]
const LENGTHS = [1, 99, 100, 101, 191, 192, 200, 201, 255, 256, 1000, 1001, 10_000, 10_001, 65_536, 200_000]

function hostileString(rng: Rng, maxLen = 200_000): string {
  const r = rng()
  if (r < 0.25) return pick(rng, SQLISH)
  if (r < 0.45) return pick(rng, UNICODE)
  if (r < 0.7) return pick(rng, ODD)
  const n = Math.min(maxLen, pick(rng, LENGTHS))
  return pick(rng, ['x', 'é', '😀', "'", '{', '\\'] as const).repeat(n)
}

const CRONS = [
  '* * * * *',
  '* * * * * *',
  '0 0 30 2 *',
  '0 0 31 2 *',
  '99 99 99 99 99',
  '*/0 * * * *',
  '-1 * * * *',
  '0 0 * * 8',
  '@reboot',
  '@yearly',
  '0 2 * * *',
  '0 0 29 2 1',
  '* * * * * * *',
  '1-2000000000 * * * *',
  '*/1 */1 */1 */1 */1 */1',
  '0 0 1 1 * 2099',
  'L * * * *',
  '0 0 L * *',
  '0 0 * * 5L',
  '0 0 ? * 1#5',
]
const ZONES = [
  'UTC',
  'Europe/London',
  'America/New_York',
  'Australia/Lord_Howe',
  'Mars/Olympus_Mons',
  'UTC+25',
  'Etc/GMT+14',
  'Etc/GMT-15',
  'America/New_York\u0000',
  '../../etc/localtime',
  'utc',
  '+05:30',
  'Z',
  'EST5EDT',
]
const DATETIMES = [
  '2024-02-30T00:00:00Z',
  '2023-02-29T00:00:00Z',
  '0000-00-00T00:00:00Z',
  '0001-01-01T00:00:00Z',
  '0999-12-31T23:59:59Z',
  '9999-12-31T23:59:59.999Z',
  '+275760-09-13T00:00:00.000Z',
  '-271821-04-20T00:00:00Z',
  '1970-01-01T00:00:00Z',
  '2038-01-19T03:14:08Z',
  '2025-03-09T02:30:00-05:00',
  '2025-06-01T18:30:00+14:59',
  '2025-06-01T18:30:00+15:00',
  '2025-06-01T24:00:00Z',
  '2025-06-01T18:60:00Z',
  '2025-06-01T18:30:61Z',
  '2025-06-01T18:30:00.123456789Z',
  '2025-06-01',
  '2025-06-01T18:30:00',
  'now',
  'yesterday',
  '1717266600',
  '2025-W22-7T00:00:00Z',
  ' 2025-06-01T18:30:00Z ',
]
const BAD_IDS = [
  '0',
  '-1',
  '1e5',
  '0x1F',
  '１',
  '9'.repeat(15),
  '9'.repeat(16),
  '9'.repeat(100),
  '18446744073709551616',
  '1 OR 1=1',
  ' 1 ',
  '1\n',
  '01',
  '+1',
  '1.0',
  '',
]
const INTS = [0, -1, 1, 2, 499, 500, 501, 1000, 1001, -2147483648, 2147483647, 86_400 * 7, 86_400 * 7 + 1]
const BIG_NUMBERS = [
  new Raw('2147483648', '2147483648'),
  new Raw('-2147483649', '-2147483649'),
  new Raw('99999999999999999999999', '99999999999999999999999'),
  new Raw('1e309', '1e309'),
  new Raw('-1e309', '-1e309'),
  new Raw('1e-400', '1e-400'),
  new Raw('9007199254740993', '9007199254740993'),
  new Raw('-0', '-0'),
]
const FLOATS = [0.5, -0.5, 1.5, 1e308, -1e308, 5e-324, Number.NaN, Number.POSITIVE_INFINITY]

function anyScalar(rng: Rng): Value {
  switch (int(rng, 0, 9)) {
    case 0:
      return pick(rng, INTS)
    case 1:
      return pick(rng, BIG_NUMBERS)
    case 2:
      return pick(rng, FLOATS)
    case 3:
      return hostileString(rng, 10_000)
    case 4:
      return chance(rng, 0.5)
    case 5:
      return null
    case 6:
      return [hostileString(rng, 100), 1]
    case 7:
      return { a: 1, b: hostileString(rng, 100) }
    case 8:
      return pick(rng, BAD_IDS)
    default:
      return pick(rng, DATETIMES)
  }
}

/** Seeded ids of rows that exist, so arguments sometimes reach the real paths. */
export interface Known {
  definitionIds: string[]
  runIds: string[]
  stepIds: string[]
  slugs: string[]
  receiverUrl: string
}

function hostileId(rng: Rng, pool: string[]): Value {
  const r = rng()
  if (r < 0.35 && pool.length > 0) return pick(rng, pool)
  if (r < 0.45 && pool.length > 0) return new Raw(pick(rng, pool), pick(rng, pool)) // an Int literal
  if (r < 0.85) return pick(rng, BAD_IDS)
  if (r < 0.9) return pick(rng, SQLISH)
  if (r < 0.95) return new Raw('1.5', '1.5')
  return hostileString(rng, 100_000)
}

function hostileJsonBomb(rng: Rng, small = false): Value {
  switch (int(rng, 0, small ? 5 : 9)) {
    case 0:
      return deepArray(pick(rng, [20, 31, 32, 33, 64, 500, 5000, 50_000]))
    case 1:
      return deepObject(pick(rng, [20, 31, 32, 33, 64, 500, 5000, 20_000]))
    case 2: {
      // wide: many keys
      const n = small ? 1000 : pick(rng, [1000, 20_000])
      const keys = Array.from({ length: n }, (_, i) => `"k${i}":${i}`).join(',')
      return new Raw(
        `{${keys}}`,
        `{${Array.from({ length: Math.min(n, 2000) }, (_, i) => `k${i}: ${i}`).join(', ')}}`,
      )
    }
    case 3: {
      const n = small ? 10_000 : pick(rng, [10_000, 100_000])
      return new Raw(
        `[${Array.from({ length: n }, () => '0').join(',')}]`,
        `[${'0, '.repeat(Math.min(n, 20_000))}0]`,
      )
    }
    case 4:
      return new Raw(
        '{"__proto__":{"polluted":true},"constructor":{"prototype":{"x":1}}}',
        '{__proto__: {polluted: true}, constructor: {prototype: {x: 1}}}',
      )
    case 5:
      return new Raw('{"a":1,"a":2,"a":{"b":3}}', '{a: 1, a: 2}')
    case 6:
      return 'x'.repeat(pick(rng, [100_000, 900_000]))
    case 7:
      return [null, true, -0, 1e308, 'str', [], {}]
    case 8:
      return pick(rng, BIG_NUMBERS)
    default:
      return new Raw(
        '{"toString":1,"valueOf":"x","hasOwnProperty":null}',
        '{toString: 1, valueOf: "x", hasOwnProperty: null}',
      )
  }
}

function hostileStep(rng: Rng, known: Known): Value {
  const kind = pick(rng, [
    'core.log',
    'core.wait',
    'core.cue',
    'core.webhook',
    'core.nope',
    '',
    'CORE.LOG',
    'core.log\u0000',
  ])
  const params: Record<string, Value> = {}
  switch (kind) {
    case 'core.log':
      params.message = chance(rng, 0.7) ? hostileString(rng, 10_000) : anyScalar(rng)
      if (chance(rng, 0.3)) params.level = pick(rng, ['info', 'warn', 'fatal', 'INFO', '', 7])
      break
    case 'core.wait':
      if (chance(rng, 0.5))
        params.seconds = pick(rng, [...INTS, ...FLOATS, ...BIG_NUMBERS, '10', null] as Value[])
      else
        params.until = pick(rng, [
          '+0s',
          '+15m',
          '-5m',
          '+99999999d',
          '+1e3s',
          '15m',
          '+',
          '+1y',
          hostileString(rng, 100),
        ])
      break
    case 'core.cue':
      params.prompt = chance(rng, 0.8) ? hostileString(rng, 10_000) : anyScalar(rng)
      if (chance(rng, 0.5)) params.timeoutSeconds = pick(rng, [...INTS, ...FLOATS, ...BIG_NUMBERS] as Value[])
      if (chance(rng, 0.3)) params.onTimeout = pick(rng, ['fail', 'continue', 'explode', null])
      break
    case 'core.webhook':
      params.url = pick(rng, [
        `${known.receiverUrl}/hook`,
        'http://169.254.169.254/latest/meta-data/',
        'http://127.0.0.1:3306/',
        'file:///etc/passwd',
        'gopher://127.0.0.1:6379/_FLUSHALL',
        'http://[::1]:22/',
        'javascript:alert(1)',
        'http://user:pass@evil.example/',
        '//evil.example',
        hostileString(rng, 1000),
      ])
      if (chance(rng, 0.3))
        params.method = pick(rng, ['GET', 'DELETE', 'CONNECT', 'TRACE', 'post', '', 'X'.repeat(1000)])
      if (chance(rng, 0.3))
        params.headers = pick(rng, [
          { 'X-Ok': 'v' },
          { 'Bad\nHeader': 'v' },
          { Host: 'evil.example' },
          { 'Content-Length': '-1' },
          { 'X-Inject': 'a\r\nSet-Cookie: x=1' },
          [1, 2],
        ] as Value[])
      if (chance(rng, 0.4))
        params.body = chance(rng, 0.5) ? { content: hostileString(rng, 10_000) } : anyScalar(rng)
      break
    default:
      params.anything = anyScalar(rng)
  }
  const step: Record<string, Value> = { kind, params: chance(rng, 0.05) ? anyScalar(rng) : params }
  if (chance(rng, 0.2))
    step.retry = chance(rng, 0.7)
      ? {
          attempts: pick(rng, [...INTS, ...FLOATS] as Value[]),
          backoffSeconds: pick(rng, [...INTS, ...FLOATS, ...BIG_NUMBERS] as Value[]),
        }
      : anyScalar(rng)
  if (chance(rng, 0.2)) step.timeoutSeconds = pick(rng, [...INTS, ...FLOATS, ...BIG_NUMBERS] as Value[])
  if (chance(rng, 0.15)) step.onError = pick(rng, ['fail', 'degrade', 'ignore', '', null, 1])
  if (chance(rng, 0.05)) step.extra = hostileJsonBomb(rng, true)
  return step
}

function hostileProgram(rng: Rng, known: Known, small = false): Value {
  const r = rng()
  if (r < 0.15) return hostileJsonBomb(rng, small)
  if (r < 0.22) return anyScalar(rng)
  if (r < 0.27) return { phases: anyScalar(rng) }
  if (r < 0.3) {
    // Over the step limit (1000).
    const steps = Array.from({ length: 1001 }, () => ({ kind: 'core.log', params: { message: 'm' } }))
    return { phases: [{ name: 'p', steps }] }
  }
  const phases: Value[] = Array.from({ length: int(rng, 0, 4) }, () => {
    const phase: Record<string, Value> = {
      name: chance(rng, 0.8)
        ? pick(rng, ['main', 'announce', 'wrap-up', '', 'x'.repeat(101), ...ODD.slice(0, 6)])
        : anyScalar(rng),
      steps: chance(rng, 0.9)
        ? Array.from({ length: int(rng, 0, 4) }, () => hostileStep(rng, known))
        : anyScalar(rng),
    }
    if (chance(rng, 0.3)) phase.ending = chance(rng, 0.7) ? chance(rng, 0.5) : anyScalar(rng)
    return phase
  })
  return { phases }
}

/** A value for one input type: usually its own kind, hostile; sometimes any other kind. */
function valueFor(rng: Rng, type: GraphQLInputType, argName: string, known: Known, depth = 0): Value {
  if (isNonNullType(type)) {
    if (chance(rng, 0.04)) return null
    return valueFor(rng, type.ofType, argName, known, depth)
  }
  if (chance(rng, 0.08)) return anyScalar(rng) // the wrong kind altogether
  if (isListType(type)) {
    if (chance(rng, 0.1)) return valueFor(rng, type.ofType, argName, known, depth + 1) // a single value for a list
    const n = pick(rng, [0, 1, 2, 3, 5, 1001, 5000])
    // Long lists hold short values: a duplicate (a scope list of 1001 copies, …) or counting up.
    if (n > 10) {
      const one = pick(rng, [...SQLISH, ...ODD, ''])
      return Array.from({ length: n }, (_, i) => (chance(rng, 0.5) ? one : `s${i}`))
    }
    return Array.from({ length: n }, () => valueFor(rng, type.ofType, argName, known, depth + 1))
  }
  if (isEnumType(type)) {
    const names = type.getValues().map((v) => v.name)
    const r = rng()
    if (r < 0.7) return new EnumValue(pick(rng, names))
    if (r < 0.85) return pick(rng, names).toLowerCase()
    return new EnumValue(pick(rng, ['NOPE', 'true', 'null_', 'RUNNING_', 'ALL']))
  }
  if (isInputObjectType(type)) {
    const out: Record<string, Value> = {}
    for (const f of Object.values(type.getFields())) {
      const required = isNonNullType(f.type) && f.defaultValue === undefined
      if (required ? chance(rng, 0.96) : chance(rng, 0.55))
        out[f.name] = valueFor(rng, f.type, f.name, known, depth + 1)
    }
    if (chance(rng, 0.04)) out.notAField = 1
    return out
  }
  if (!isScalarType(type)) return null
  // Inside lists and input objects values stay small, so a body stays near the limit, not past it tenfold.
  const maxLen = depth > 0 ? 10_000 : 200_000
  switch (type.name) {
    case 'ID': {
      const pool = /step/i.test(argName)
        ? known.stepIds
        : /definition/i.test(argName)
          ? known.definitionIds
          : argName === 'id'
            ? [...known.runIds, ...known.definitionIds]
            : known.runIds
      return hostileId(rng, pool)
    }
    case 'Int':
      return chance(rng, 0.7) ? pick(rng, INTS) : pick(rng, [...BIG_NUMBERS, ...FLOATS] as Value[])
    case 'Float':
      return pick(rng, [...FLOATS, ...INTS] as Value[])
    case 'Boolean':
      return chance(rng, 0.8) ? chance(rng, 0.5) : pick(rng, ['true', 0, 1, 'yes'] as Value[])
    case 'DateTime':
      return chance(rng, 0.85)
        ? pick(rng, DATETIMES)
        : pick(rng, [0, -1, 8.64e15 + 1, 1717266600000] as Value[])
    case 'JSON':
      if (argName === 'program') return hostileProgram(rng, known, depth > 0)
      if (chance(rng, 0.5)) return hostileJsonBomb(rng, depth > 0)
      return chance(rng, 0.6) ? { room: hostileString(rng, 1000), n: pick(rng, INTS) } : anyScalar(rng)
    default: {
      // String, by what it names.
      if (argName === 'schedule') return chance(rng, 0.8) ? pick(rng, CRONS) : hostileString(rng, maxLen)
      if (argName === 'timezone') return chance(rng, 0.8) ? pick(rng, ZONES) : hostileString(rng, maxLen)
      if (argName === 'slug')
        return chance(rng, 0.3) && known.slugs.length > 0
          ? pick(rng, known.slugs)
          : chance(rng, 0.3)
            ? `fz-${Math.floor(rng() * 1e9)}`
            : hostileString(rng, maxLen)
      if (argName === 'concurrencyKey')
        return pick(rng, [
          'k:{{run.scope}}',
          '{{params.x}}',
          '{{nope}}',
          '{{run.id}}',
          '',
          ' ',
          hostileString(rng, 1000),
        ])
      return hostileString(rng, maxLen)
    }
  }
}

/** The GraphQL type string of an input type, e.g. `[String!]!`. */
const typeString = (t: GraphQLInputType): string => String(t)
const WRONG_DECLARED = [
  'Int',
  'Int!',
  'String',
  'String!',
  '[ID]',
  'JSON',
  'Boolean!',
  'DateTime',
  '[[String!]!]',
  'RunStatus',
]

// ── Selections ───────────────────────────────────────────────────────────

interface Ctx {
  rng: Rng
  known: Known
  vars: { name: string; type: string; value: Value }[]
  inline: number
}

function argsFor(ctx: Ctx, args: readonly GraphQLArgument[]): string {
  const parts: string[] = []
  for (const a of args) {
    const required = isNonNullType(a.type) && a.defaultValue === undefined
    if (!(required ? chance(ctx.rng, 0.97) : chance(ctx.rng, 0.6))) continue
    const value = valueFor(ctx.rng, a.type, a.name, ctx.known)
    if (chance(ctx.rng, 0.5)) {
      ctx.inline++
      parts.push(`${a.name}: ${printLiteral(value)}`)
    } else {
      const name = `v${ctx.vars.length}`
      const type = chance(ctx.rng, 0.07) ? pick(ctx.rng, WRONG_DECLARED) : typeString(a.type)
      ctx.vars.push({ name, type, value })
      parts.push(`${a.name}: $${name}`)
    }
  }
  return parts.length > 0 ? `(${parts.join(', ')})` : ''
}

function selectionFor(ctx: Ctx, type: GraphQLNamedType, depthLeft: number): string {
  if (!isObjectType(type)) return ''
  const fields = Object.values(type.getFields())
  const leaves = fields.filter((f) => !isObjectType(getNamedType(f.type)))
  const objects = fields.filter((f) => isObjectType(getNamedType(f.type)))
  const chosen: GraphQLField<unknown, unknown>[] = []
  const nLeaves = leaves.length > 0 ? int(ctx.rng, 1, Math.min(6, leaves.length)) : 0
  for (let i = 0; i < nLeaves; i++) chosen.push(pick(ctx.rng, leaves))
  // A type of objects only (a page: nodes and pageInfo) needs one of them, however deep.
  if (depthLeft > 0 || nLeaves === 0) {
    const nObjects = int(ctx.rng, nLeaves === 0 ? 1 : 0, Math.min(2, objects.length))
    for (let i = 0; i < nObjects; i++) chosen.push(pick(ctx.rng, objects))
  }
  const parts: string[] = []
  const seen = new Set<string>()
  for (const f of chosen) {
    const alias = seen.has(f.name) || (f.args.length > 0 && chance(ctx.rng, 0.2)) ? `a${parts.length}: ` : ''
    seen.add(f.name)
    const sub = selectionFor(ctx, getNamedType(f.type), depthLeft - 1)
    parts.push(`${alias}${f.name}${argsFor(ctx, f.args)}${sub ? ` ${sub}` : ''}`)
  }
  if (chance(ctx.rng, 0.05)) parts.push(`... on ${type.name} { __typename }`)
  return `{ ${parts.join(' ')} }`
}

// ── Documents ────────────────────────────────────────────────────────────

export interface FuzzCase {
  /** What it exercises, for reports. */
  label: string
  /** The raw POST body. */
  body: string
}

/**
 * One request body. Mostly a document for one to three root fields of one
 * operation type; sometimes a hostile request envelope (wrong variable JSON
 * types, mismatched operationName, bodies over the limit, deep literals).
 */
export function generateCase(rng: Rng, schema: GraphQLSchema, known: Known, maxBodyBytes: number): FuzzCase {
  // Bodies may go past the limit (the server must say 413), but not absurdly far.
  for (let attempt = 0; attempt < 5; attempt++) {
    const c = generateOne(rng, schema, known, maxBodyBytes)
    if (c.body.length <= 3 * maxBodyBytes) return c
  }
  return { label: 'query health', body: '{"query":"{ health { ok } }"}' }
}

function generateOne(rng: Rng, schema: GraphQLSchema, known: Known, maxBodyBytes: number): FuzzCase {
  const envelope = rng()
  if (envelope < 0.04) return envelopeCase(rng, known, maxBodyBytes)
  const op = chance(rng, 0.5) ? 'query' : 'mutation'
  const root = (op === 'query' ? schema.getQueryType() : schema.getMutationType()) as GraphQLObjectType
  const fields = Object.values(root.getFields())
  const ctx: Ctx = { rng, known, vars: [], inline: 0 }
  const n = chance(rng, 0.8) ? 1 : int(rng, 2, 3)
  const parts: string[] = []
  const names: string[] = []
  for (let i = 0; i < n; i++) {
    const f = pick(rng, fields)
    names.push(f.name)
    // Depth 1..11: the limit is 10, so some documents are one level too deep.
    const depth = int(rng, 0, 10)
    const sub = selectionFor(ctx, getNamedType(f.type), depth)
    parts.push(`${n > 1 ? `r${i}: ` : ''}${f.name}${argsFor(ctx, f.args)}${sub ? ` ${sub}` : ''}`)
  }
  const varDefs = ctx.vars.length > 0 ? `(${ctx.vars.map((v) => `$${v.name}: ${v.type}`).join(', ')})` : ''
  const opName = chance(rng, 0.3) ? ` Fuzz${Math.floor(rng() * 1000)}` : ''
  const query = `${op}${opName}${varDefs} { ${parts.join(' ')} }`
  const variables = `{${ctx.vars.map((v) => `${JSON.stringify(v.name)}:${printJson(v.value)}`).join(',')}}`
  const body = `{"query":${JSON.stringify(query)},"variables":${variables}}`
  return { label: `${op} ${names.join('+')}`, body }
}

function envelopeCase(rng: Rng, known: Known, maxBodyBytes: number): FuzzCase {
  const q = (s: string) => JSON.stringify(s)
  switch (int(rng, 0, 11)) {
    case 0:
      return {
        label: 'envelope: variables not an object',
        body: `{"query":${q('query ($l: Int) { runs(limit: $l) { id } }')},"variables":${pick(rng, ['[1]', '"x"', '5', 'true'])}}`,
      }
    case 1:
      return {
        label: 'envelope: operationName matches nothing',
        body: `{"query":${q('query A { health { ok } }')},"operationName":"B"}`,
      }
    case 2:
      return {
        label: 'envelope: query not a string',
        body: `{"query":${pick(rng, ['1', '{}', '[]', 'null', 'true'])}}`,
      }
    case 3: {
      const pad = 'x'.repeat(maxBodyBytes + 1024)
      return {
        label: 'envelope: body over the limit',
        body: `{"query":${q('{ health { ok } }')},"variables":{"p":"${pad}"}}`,
      }
    }
    case 4: {
      const d = pick(rng, [100, 1000, 3000, 10_000])
      return {
        label: `envelope: literal nested ${d} deep`,
        body: `{"query":${q(`mutation { startRun(definitionId: "${pick(rng, known.definitionIds)}", scope: "deep", params: {a: ${'['.repeat(d)}${']'.repeat(d)}}) { id } }`)}}`,
      }
    }
    case 5: {
      const d = pick(rng, [50, 500, 5000])
      return {
        label: `envelope: selection nested ${d} deep`,
        body: `{"query":${q(`{ runs ${'{ definition '.repeat(d)}{ id }${' }'.repeat(d)} }`)}}`,
      }
    }
    case 6: {
      const n = pick(rng, [500, 5000])
      const aliases = Array.from({ length: n }, (_, i) => `a${i}: health { ok }`).join(' ')
      return { label: `envelope: ${n} aliases`, body: `{"query":${q(`{ ${aliases} }`)}}` }
    }
    case 7: {
      const n = pick(rng, [200, 2000])
      const defs = Array.from({ length: n }, (_, i) => `$v${i}: String`).join(', ')
      return {
        label: `envelope: ${n} variable definitions`,
        body: `{"query":${q(`query (${defs}) { health { ok } }`)},"variables":{}}`,
      }
    }
    case 8:
      return {
        label: 'envelope: extensions and unknown keys',
        body: `{"query":${q('{ health { ok } }')},"extensions":{"persistedQuery":{"version":1,"sha256Hash":"${'0'.repeat(64)}"}},"foo":[1,2]}`,
      }
    case 9:
      return {
        label: 'envelope: two operations, no name',
        body: `{"query":${q('query A { health { ok } } query B { runs { id } }')}}`,
      }
    case 10:
      return {
        label: 'envelope: unterminated document',
        body: `{"query":${q(`{ runs(limit: ${'['.repeat(50)}`)}}`,
      }
    default: {
      // A subscription over plain HTTP POST (no event stream asked for).
      return {
        label: 'envelope: subscription over POST',
        body: `{"query":${q(`subscription { runStatus(id: ${q(String(pick(rng, known.runIds.length > 0 ? known.runIds : ['1'])))}) { id status } }`)}}`,
      }
    }
  }
}
