/**
 * Manifests: a definition as a file (JSON or YAML), the shape that
 * `applyDefinitions` takes and `exportDefinitions` answers. One zod schema is
 * the source of both the validation here and the JSON Schema editors use
 * (schema/definition.schema.json, served at GET /schema/definition.json).
 */
import { z } from 'zod'
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import {
  DEFINITION_STATES,
  type DefinitionState,
  OVERLAP_POLICIES,
  type OverlapPolicy,
} from '../../sql/states.ts'
import { type PublishChecks, programProblems, programSchema } from '../runner/program.ts'
import { zodProblems } from '../runner/steps/params.ts'
import type { StepRegistry } from '../runner/steps/registry.ts'

/** At most this many manifests per call: a show catalogue, not a bulk load. */
export const MAX_MANIFESTS = 1000

const upper = <T extends readonly string[]>(values: T) =>
  values.map((v) => v.toUpperCase()) as { [K in keyof T]: Uppercase<T[K]> }

const STATES = upper(DEFINITION_STATES)
const OVERLAPS = upper(OVERLAP_POLICIES)

const instant = z.iso
  .datetime({ offset: true, error: 'must be an ISO-8601 date-time such as "2026-06-01T18:30:00Z"' })
  .nullable()
  .optional()

/** Every field but the program; the program is checked by the program validator (with the step registry). */
const manifestFields = {
  slug: z.string().meta({ description: 'Unique and immutable; how a manifest finds its definition.' }),
  title: z.string(),
  description: z.string().nullable().optional(),
  schedule: z
    .string()
    .nullable()
    .optional()
    .meta({ description: '5- or 6-field cron in `timezone`; null or omitted = started by hand only.' }),
  timezone: z.string().optional().meta({ description: 'IANA zone, e.g. "Europe/London". Default "UTC".' }),
  scopes: z.array(z.string()).optional().meta({ description: 'Default [""] (the default scope).' }),
  graceSeconds: z
    .number()
    .int()
    .min(0)
    .max(7 * 24 * 3600)
    .optional()
    .meta({ description: 'Default 300.' }),
  concurrencyKey: z.string().nullable().optional(),
  overlap: z.enum(OVERLAPS).optional().meta({ description: 'Default ALLOW_ALL.' }),
  startsAt: instant,
  endsAt: instant,
  state: z.enum(STATES).optional().meta({ description: 'Default ACTIVE.' }),
  calendars: z.array(z.string()).optional().meta({ description: 'Blackout calendars, by name.' }),
}

const fieldsSchema = z.strictObject(
  { ...manifestFields, program: z.unknown() },
  {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown key (allowed: ${[...Object.keys(manifestFields), 'program'].join(', ')})`
        : undefined,
  },
)

/** The manifest as editors see it (the program's shape included). */
export const manifestSchema = z
  .strictObject({ ...manifestFields, program: programSchema })
  .meta({ title: 'showrunner definition', description: 'One definition as a file; matched by slug.' })

/** A manifest after validation, with every default filled in (the state the definition should have). */
export interface Manifest {
  /** Where it stood in the list, for paths such as `[2].title`. */
  index: number
  slug: string
  title: string
  description: string | null
  schedule: string | null
  timezone: string
  scopes: string[]
  graceSeconds: number
  concurrencyKey: string | null
  overlap: OverlapPolicy
  startsAt: Date | null
  endsAt: Date | null
  state: DefinitionState
  calendars: string[]
  program: unknown
}

/** One problem of a list of manifests, e.g. `[1].program.phases[0].steps[2].params.url`. */
export interface ManifestProblem {
  path: string
  message: string
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

/**
 * The shape of every manifest, and of every program in it (kinds and params
 * included); what needs the field rules (cron, zone, limits) is checked by the
 * caller. Answers the manifests with defaults filled in when there is no problem.
 */
export function parseManifests(
  input: unknown,
  registry: StepRegistry,
  checks: PublishChecks = {},
): { manifests: Manifest[]; problems: ManifestProblem[]; fields: CheckableFields[] } {
  if (!Array.isArray(input))
    return {
      manifests: [],
      fields: [],
      problems: [{ path: '', message: 'must be a list of manifests (a JSON array)' }],
    }
  if (input.length > MAX_MANIFESTS)
    return {
      manifests: [],
      fields: [],
      problems: [{ path: '', message: `has ${input.length} manifests; at most ${MAX_MANIFESTS} per call` }],
    }
  const problems: ManifestProblem[] = []
  const manifests: Manifest[] = []
  const fields: CheckableFields[] = []
  const slugs = new Map<string, number>()
  input.forEach((raw: unknown, i) => {
    const base = `[${i}]`
    if (!isObject(raw)) {
      problems.push({ path: base, message: 'must be an object with "slug", "title" and "program"' })
      return
    }
    const shape = fieldsSchema.safeParse(raw)
    if (!shape.success)
      for (const p of zodProblems(shape.error.issues, raw))
        problems.push({ path: p.path ? `${base}.${p.path}` : base, message: p.message })
    if (raw.program === undefined) problems.push({ path: `${base}.program`, message: 'is required' })
    else
      for (const p of programProblems(raw.program, registry, checks))
        problems.push({ path: p.path ? `${base}.program.${p.path}` : `${base}.program`, message: p.message })
    if (typeof raw.slug === 'string') {
      const first = slugs.get(raw.slug)
      if (first !== undefined)
        problems.push({
          path: `${base}.slug`,
          message: `${JSON.stringify(raw.slug)} is also the slug of [${first}]; each definition once`,
        })
      else slugs.set(raw.slug, i)
    }
    fields.push({ index: i, fields: wellTyped(raw) })
    if (!shape.success) return
    const m = shape.data
    manifests.push({
      index: i,
      slug: m.slug,
      title: m.title,
      description: m.description ?? null,
      schedule: m.schedule?.trim() || null,
      timezone: m.timezone ?? 'UTC',
      scopes: m.scopes ?? [''],
      graceSeconds: m.graceSeconds ?? 300,
      concurrencyKey: m.concurrencyKey ?? null,
      overlap: (m.overlap?.toLowerCase() ?? 'allow_all') as OverlapPolicy,
      startsAt: m.startsAt ? new Date(m.startsAt) : null,
      endsAt: m.endsAt ? new Date(m.endsAt) : null,
      state: (m.state?.toLowerCase() ?? 'active') as DefinitionState,
      calendars: [...(m.calendars ?? [])].sort(),
      program: m.program,
    })
  })
  return { manifests, problems, fields }
}

/** The fields of one manifest whose type is right, for the field rules (which assume types). */
export interface CheckableFields {
  index: number
  fields: Record<string, unknown>
}

function wellTyped(raw: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [key, schema] of Object.entries(manifestFields)) {
    if (key === 'state' || key === 'overlap' || key === 'calendars' || raw[key] === undefined) continue
    const parsed = schema.safeParse(raw[key])
    if (!parsed.success) continue
    out[key] =
      (key === 'startsAt' || key === 'endsAt') && typeof parsed.data === 'string'
        ? new Date(parsed.data)
        : parsed.data
  }
  return out
}

/**
 * A definition as a manifest, keys in a fixed order so that an export is the
 * same bytes every time. Optional fields appear only when set; the defaults a
 * reader needs (zone, scopes, grace, overlap, state) always do.
 */
export function toManifest(
  def: DefinitionRow,
  program: unknown,
  calendars: readonly string[] = [],
): Record<string, unknown> {
  const m: Record<string, unknown> = { slug: def.slug, title: def.title }
  if (def.description !== null) m.description = def.description
  m.schedule = def.schedule
  m.timezone = def.timezone
  m.scopes = def.scopes
  m.graceSeconds = def.graceSeconds
  if (def.concurrencyKey !== null) m.concurrencyKey = def.concurrencyKey
  m.overlap = def.overlap.toUpperCase()
  if (def.startsAt) m.startsAt = def.startsAt.toISOString()
  if (def.endsAt) m.endsAt = def.endsAt.toISOString()
  m.state = def.state.toUpperCase()
  if (calendars.length > 0) m.calendars = [...calendars].sort()
  m.program = program
  return m
}

/** JSON with object keys sorted at every level: two programs are the same when these are equal. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (!isObject(v)) return v
    const sorted: Record<string, unknown> = {}
    for (const k of Object.keys(v).sort()) sorted[k] = v[k]
    return sorted
  })
}

/** The JSON Schema of one manifest, for editors (draft 2020-12). */
export function definitionJsonSchema(): Record<string, unknown> {
  return {
    $id: 'showrunner/definition.schema.json',
    ...z.toJSONSchema(manifestSchema, { target: 'draft-2020-12', unrepresentable: 'any' }),
  }
}
