/**
 * The JSON-valued hostile inputs of the fuzz drill (fuzz.ts asks for them by
 * argument): JSON bombs (deep, wide, huge, prototype keys, duplicate keys)
 * within the body limit, and show programs whose phases and steps have every
 * parameter wrong: unknown kinds, waits out of range, webhooks to places a
 * server must not reach, headers that inject.
 */
import {
  anyScalar,
  BIG_NUMBERS,
  chance,
  FLOATS,
  hostileString,
  INTS,
  int,
  type Known,
  ODD,
  pick,
  Raw,
  type Rng,
  type Value,
} from './fuzzValues.ts'

const deepArray = (d: number) => new Raw('['.repeat(d) + ']'.repeat(d), '['.repeat(d) + ']'.repeat(d))
const deepObject = (d: number) =>
  new Raw('{"a":'.repeat(d) + '1' + '}'.repeat(d), '{a: '.repeat(d) + '1' + '}'.repeat(d))

export function hostileJsonBomb(rng: Rng, small = false): Value {
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

export function hostileProgram(rng: Rng, known: Known, small = false): Value {
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
