/**
 * The seeded randomness and the hostile values behind the fuzz drill's
 * documents (fuzz.ts builds the documents, fuzzPrograms.ts the JSON-valued
 * inputs): corpora of SQL-looking text, unicode, odd strings and lengths,
 * cron expressions, time zones, date-times, bad ids and numbers JavaScript
 * cannot hold, and the two printers that write a value as a GraphQL literal or
 * as JSON, so one value can go inline or through variables.
 *
 * Deterministic for a seed (mulberry32), so a failing case can be replayed.
 */

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

export const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng() * items.length)] as T
export const chance = (rng: Rng, p: number) => rng() < p
export const int = (rng: Rng, lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1))

// ── Values ───────────────────────────────────────────────────────────────

/** A value with its own text in each syntax: deep nesting and numbers JS cannot hold. */
export class Raw {
  constructor(
    readonly json: string,
    readonly gql: string,
  ) {}
}
/** An enum value: bare in a document, a string in variables. */
export class EnumValue {
  constructor(readonly name: string) {}
}
export type Value = null | boolean | number | string | Raw | EnumValue | Value[] | { [k: string]: Value }

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

export const SQLISH = [
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
export const ODD = [
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

export function hostileString(rng: Rng, maxLen = 200_000): string {
  const r = rng()
  if (r < 0.25) return pick(rng, SQLISH)
  if (r < 0.45) return pick(rng, UNICODE)
  if (r < 0.7) return pick(rng, ODD)
  const n = Math.min(maxLen, pick(rng, LENGTHS))
  return pick(rng, ['x', 'é', '😀', "'", '{', '\\'] as const).repeat(n)
}

export const CRONS = [
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
export const ZONES = [
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
export const DATETIMES = [
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
export const INTS = [
  0,
  -1,
  1,
  2,
  499,
  500,
  501,
  1000,
  1001,
  -2147483648,
  2147483647,
  86_400 * 7,
  86_400 * 7 + 1,
]
export const BIG_NUMBERS = [
  new Raw('2147483648', '2147483648'),
  new Raw('-2147483649', '-2147483649'),
  new Raw('99999999999999999999999', '99999999999999999999999'),
  new Raw('1e309', '1e309'),
  new Raw('-1e309', '-1e309'),
  new Raw('1e-400', '1e-400'),
  new Raw('9007199254740993', '9007199254740993'),
  new Raw('-0', '-0'),
]
export const FLOATS = [0.5, -0.5, 1.5, 1e308, -1e308, 5e-324, Number.NaN, Number.POSITIVE_INFINITY]

export function anyScalar(rng: Rng): Value {
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

export function hostileId(rng: Rng, pool: string[]): Value {
  const r = rng()
  if (r < 0.35 && pool.length > 0) return pick(rng, pool)
  if (r < 0.45 && pool.length > 0) return new Raw(pick(rng, pool), pick(rng, pool)) // an Int literal
  if (r < 0.85) return pick(rng, BAD_IDS)
  if (r < 0.9) return pick(rng, SQLISH)
  if (r < 0.95) return new Raw('1.5', '1.5')
  return hostileString(rng, 100_000)
}
