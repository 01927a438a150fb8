/**
 * The document generator behind the bad-input fuzz drill (fuzz.drill.test.ts).
 *
 * It walks the real schema (introspected from the running server) and builds,
 * for a root field, a well-formed GraphQL document: arguments inline or through
 * variables, a selection set that may go deep (up to and just past the depth
 * limit), aliases and inline fragments. The shapes are valid; the values are
 * hostile (fuzzValues.ts, fuzzPrograms.ts): numbers out of range or NaN,
 * enormous and odd strings, unicode, SQL-looking text, template syntax, bad ids
 * and date-times, JSON bombs (deep, wide, huge) within the body limit, programs
 * with every parameter wrong, and variables whose JSON type does not match what
 * they are declared as.
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
import { hostileJsonBomb, hostileProgram } from './fuzzPrograms.ts'
import {
  anyScalar,
  BIG_NUMBERS,
  CRONS,
  chance,
  DATETIMES,
  EnumValue,
  FLOATS,
  hostileId,
  hostileString,
  INTS,
  int,
  type Known,
  ODD,
  pick,
  printJson,
  printLiteral,
  type Rng,
  SQLISH,
  type Value,
  ZONES,
} from './fuzzValues.ts'

// ── Values for the schema's arguments ────────────────────────────────────

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
