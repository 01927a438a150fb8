/**
 * Definition management: create (with version 1), update, publish a version,
 * change state. Validation happens here, once, with messages that name the field;
 * the API layer stays thin and the database only ever sees valid rows.
 */
import * as audit from '../../sql/auditLog.ts'
import { DB_ERRNO, type Db, isDbErrno, type Queryable } from '../../sql/db.ts'
import type { DefinitionPatch, DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { VersionRow } from '../../sql/eventVersions.ts'
import * as versions from '../../sql/eventVersions.ts'
import * as overrides from '../../sql/occurrenceOverrides.ts'
import type { DefinitionState } from '../../sql/states.ts'
import { AppError, badInput, conflict, ERROR_CODES, notFound } from '../errors.ts'
import type { Clock } from '../runner/clock.ts'
import { occurrenceRuns } from '../runner/materialise.ts'
import { validateProgram } from '../runner/program.ts'
import { canonicalTimezone, occurrenceStream, validateSchedule } from '../runner/schedule.ts'
import type { StepRegistry } from '../runner/steps/registry.ts'
import { templateProblems } from '../runner/template.ts'
import { resolveCalendarNames, setDefinitionCalendars } from './calendars.ts'

export interface DefinitionDeps {
  db: Db
  registry: StepRegistry
  clock: Clock
  /** Look-ahead used to re-evaluate scheduled runs after a schedule change. @default 24 h */
  horizonMs?: number
  /** Ask the runner to materialise now (a definition changed). */
  nudgeMaterialise?: () => void
  /** WEBHOOK_ALLOW: a webhook URL it refuses is refused at publish; left out, not checked. */
  webhookAllow?: readonly string[]
}

/** Every field a definition has besides its state and program; the slug is set once. */
export interface DefinitionFields extends DefinitionPatch {
  slug?: string
  /** Names of the blackout calendars it observes; omitted = unchanged (none on create). */
  calendars?: string[]
}

export interface CreateDefinitionInput extends DefinitionFields {
  slug: string
  title: string
  state?: DefinitionState
  program: unknown
}

export const SLUG = /^[a-z0-9](?:[a-z0-9._-]{0,98}[a-z0-9])?$/
const MAX_GRACE_SECONDS = 7 * 24 * 3600

/**
 * The longest value each text field may hold: the width of its column, so a
 * value that would not fit is refused here, naming the field and the limit,
 * instead of by the database.
 */
export const FIELD_LIMITS = {
  slug: 100,
  title: 200,
  description: 10_000,
  schedule: 120,
  timezone: 64,
  concurrencyKey: 255,
  scope: 191,
  scopes: 1000,
} as const

/** Every problem with the given fields, each naming its field; empty when valid. */
export function fieldProblems(f: DefinitionFields, current?: DefinitionRow): string[] {
  const problems: string[] = []
  if (f.slug !== undefined && !SLUG.test(f.slug)) {
    problems.push(
      'slug: use 1–100 lowercase letters, digits, ".", "_" or "-", starting and ending with a letter or digit',
    )
  }
  if (f.title !== undefined && (f.title.trim() === '' || f.title.length > FIELD_LIMITS.title)) {
    problems.push(`title: must be 1–${FIELD_LIMITS.title} characters`)
  }
  if (f.description != null && f.description.length > FIELD_LIMITS.description)
    problems.push(`description: at most ${FIELD_LIMITS.description.toLocaleString('en')} characters`)
  const timezone = f.timezone ?? current?.timezone ?? 'UTC'
  const scheduleTooLong = f.schedule != null && f.schedule.length > FIELD_LIMITS.schedule
  if (scheduleTooLong) {
    problems.push(
      `schedule: at most ${FIELD_LIMITS.schedule} characters (got ${f.schedule?.length}); a cron expression is 5 or 6 short fields`,
    )
  }
  if (f.timezone !== undefined && f.timezone.length > FIELD_LIMITS.timezone) {
    problems.push(`timezone: at most ${FIELD_LIMITS.timezone} characters (got ${f.timezone.length})`)
  } else if (f.timezone !== undefined && canonicalTimezone(f.timezone) === null) {
    problems.push(`timezone: "${f.timezone}" is not an IANA time zone (e.g. "Europe/London")`)
  } else if (!scheduleTooLong) {
    const schedule = f.schedule !== undefined ? f.schedule : current?.schedule
    if (schedule != null && (f.schedule !== undefined || f.timezone !== undefined)) {
      for (const p of validateSchedule(schedule, timezone)) problems.push(`schedule: ${p}`)
    }
  }
  if (
    f.graceSeconds !== undefined &&
    (!Number.isInteger(f.graceSeconds) || f.graceSeconds < 0 || f.graceSeconds > MAX_GRACE_SECONDS)
  ) {
    problems.push(`graceSeconds: must be a whole number from 0 to ${MAX_GRACE_SECONDS}`)
  }
  if (f.concurrencyKey != null) {
    if (f.concurrencyKey.trim() === '' || f.concurrencyKey.length > FIELD_LIMITS.concurrencyKey)
      problems.push(`concurrencyKey: must be 1–${FIELD_LIMITS.concurrencyKey} characters`)
    for (const p of templateProblems(f.concurrencyKey, 'concurrencyKey'))
      problems.push(`${p.path}: ${p.message}`)
  }
  for (const field of ['startsAt', 'endsAt'] as const) {
    const value = f[field]
    if (value != null && (!(value instanceof Date) || Number.isNaN(value.getTime())))
      problems.push(`${field}: must be a valid ISO-8601 date-time`)
  }
  const startsAt = f.startsAt !== undefined ? f.startsAt : current?.startsAt
  const endsAt = f.endsAt !== undefined ? f.endsAt : current?.endsAt
  if (
    (f.startsAt !== undefined || f.endsAt !== undefined) &&
    startsAt instanceof Date &&
    endsAt instanceof Date &&
    startsAt.getTime() > endsAt.getTime()
  ) {
    problems.push(
      `endsAt: ${endsAt.toISOString()} is before startsAt ${startsAt.toISOString()}; the schedule would never fire`,
    )
  }
  if (f.scopes !== undefined) {
    if (f.scopes.length === 0) problems.push('scopes: give at least one scope ("" is the default scope)')
    if (f.scopes.length > FIELD_LIMITS.scopes) problems.push(`scopes: at most ${FIELD_LIMITS.scopes} scopes`)
    if (new Set(f.scopes).size !== f.scopes.length) problems.push('scopes: must not repeat a scope')
    f.scopes.forEach((s, i) => {
      if (s.length > FIELD_LIMITS.scope)
        problems.push(`scopes[${i}]: at most ${FIELD_LIMITS.scope} characters`)
    })
  }
  return problems
}

function assertValid(problems: string[]): void {
  if (problems.length > 0) {
    throw badInput(`Invalid definition: ${problems.join('; ')}`, { problems })
  }
}

/** Definition mutations are recorded with their actor and outcome in the audit table. */
function recordAudit(
  deps: DefinitionDeps,
  actor: string,
  action: string,
  targetId: string,
  outcome: audit.AuditEntry['outcome'],
  detail: Record<string, unknown>,
): Promise<void> {
  return audit.record(deps.db, { actor, action, targetType: 'definition', targetId, outcome, detail })
}

/**
 * Run a definition mutation so that a refusal (invalid input, a conflict, an
 * unknown id) is audited with its code and reason before it reaches the
 * caller: "what was refused, to whom" matters as much as what was done.
 */
async function auditingRefusals<T>(
  deps: DefinitionDeps,
  actor: string,
  action: string,
  targetId: string,
  mutate: () => Promise<T>,
): Promise<T> {
  try {
    return await mutate()
  } catch (err) {
    if (err instanceof AppError) {
      const details = JSON.stringify(err.details ?? {}).length <= 4000 ? err.details : undefined
      await recordAudit(deps, actor, action, targetId.slice(0, 100), 'refused', {
        code: err.code,
        reason: err.message.slice(0, 1000),
        ...details,
      })
    }
    throw err
  }
}

async function mustGet(db: Db, id: number): Promise<DefinitionRow> {
  const def = await definitions.getById(db, id)
  if (!def) throw notFound('definition', id)
  return def
}

/** Create a definition and publish `program` as its version 1. */
export function createDefinition(
  deps: DefinitionDeps,
  input: CreateDefinitionInput,
  actor: string,
): Promise<DefinitionRow> {
  return auditingRefusals(deps, actor, 'createDefinition', String(input.slug), () =>
    create(deps, input, actor),
  )
}

async function create(
  deps: DefinitionDeps,
  input: CreateDefinitionInput,
  actor: string,
): Promise<DefinitionRow> {
  const problems = fieldProblems(input)
  let program: unknown
  try {
    program = validateProgram(input.program, deps.registry, { webhookAllow: deps.webhookAllow })
  } catch (err) {
    if (!(err instanceof AppError)) throw err
    problems.push(err.message)
  }
  assertValid(problems)
  const calendarIds = input.calendars ? await resolveCalendarNames(deps.db, input.calendars) : []
  let id: number
  try {
    id = await versions.createWithFirstVersion(
      deps.db,
      {
        slug: input.slug,
        title: input.title.trim(),
        description: input.description ?? null,
        schedule: input.schedule?.trim() || null,
        timezone: canonicalTimezone(input.timezone ?? 'UTC') ?? 'UTC',
        graceSeconds: input.graceSeconds ?? 300,
        concurrencyKey: input.concurrencyKey ?? null,
        scopes: input.scopes ?? [''],
        state: input.state ?? 'active',
        overlap: input.overlap ?? 'allow_all',
        startsAt: input.startsAt ?? null,
        endsAt: input.endsAt ?? null,
      },
      program,
      actor,
    )
  } catch (err) {
    if (isDbErrno(err, DB_ERRNO.DUP_ENTRY)) {
      throw conflict(
        `A definition with slug "${input.slug}" already exists; pick another slug or update that one.`,
      )
    }
    throw err
  }
  if (calendarIds.length > 0) await setDefinitionCalendars(deps, id, calendarIds)
  await recordAudit(deps, actor, 'createDefinition', String(id), 'ok', { slug: input.slug })
  deps.nudgeMaterialise?.()
  return mustGet(deps.db, id)
}

/**
 * Update fields (omitted = unchanged; the slug is immutable). When the schedule,
 * zone or scopes change, scheduled runs that the new schedule no longer asks for
 * are cancelled, and the horizon is materialised again.
 */
export function updateDefinition(
  deps: DefinitionDeps,
  id: number,
  patch: DefinitionPatch & { calendars?: string[] },
  actor: string,
): Promise<DefinitionRow> {
  return auditingRefusals(deps, actor, 'updateDefinition', String(id), () => update(deps, id, patch, actor))
}

async function update(
  deps: DefinitionDeps,
  id: number,
  patch: DefinitionPatch & { calendars?: string[] },
  actor: string,
): Promise<DefinitionRow> {
  const current = await mustGet(deps.db, id)
  if (current.state === 'archived')
    throw conflict(`Definition "${current.slug}" is archived; set it ACTIVE before editing.`)
  const normalised: DefinitionPatch = { ...patch }
  if (patch.schedule !== undefined) normalised.schedule = patch.schedule?.trim() || null
  if (patch.timezone !== undefined) normalised.timezone = canonicalTimezone(patch.timezone) ?? patch.timezone
  assertValid(fieldProblems(patch, current))
  const calendarIds = patch.calendars ? await resolveCalendarNames(deps.db, patch.calendars) : null
  await definitions.update(deps.db, id, normalised)
  // Runs waiting to start become missed at their start plus the grace: a new
  // grace moves that instant for every one of them.
  if (patch.graceSeconds !== undefined) await runs.resetMissedAt(deps.db, id)
  const updated = await mustGet(deps.db, id)
  const rescheduled = definitions.reschedules(patch)
  let cancelled = 0
  if (rescheduled) cancelled = await dropUnscheduledRuns(deps, updated)
  if (calendarIds) cancelled += await setDefinitionCalendars(deps, id, calendarIds)
  await recordAudit(deps, actor, 'updateDefinition', String(id), 'ok', {
    fields: Object.keys(patch),
    cancelledRuns: cancelled,
  })
  deps.nudgeMaterialise?.()
  return updated
}

/**
 * Cancel future scheduled runs (made by the schedule) that the current schedule
 * does not produce; `db` may be the caller's transaction.
 */
export async function dropUnscheduledRuns(
  deps: DefinitionDeps,
  def: DefinitionRow,
  db: Queryable = deps.db,
): Promise<number> {
  const now = deps.clock.now()
  const future = await runs.futureScheduled(db, def.id, now)
  if (future.length === 0) return 0
  const latest = new Date(Math.max(now.getTime(), ...future.map((r) => r.scheduledFor.getTime())))
  const wanted = new Set(
    occurrenceRuns(def, new Date(now.getTime() - 1), latest).map(
      (r) => `${r.scope}|${r.scheduledFor.getTime()}`,
    ),
  )
  // A moved occurrence's run stays while its original instant is still one of the schedule's.
  for (const o of await overrides.movedInto(db, def.id, new Date(now.getTime() - 1), latest))
    if (o.movedTo && occursAt(def, o.originalAt)) wanted.add(`${o.scope}|${o.movedTo.getTime()}`)
  const stale = future.filter((r) => !wanted.has(`${r.scope}|${r.scheduledFor.getTime()}`)).map((r) => r.id)
  return runs.transitionMany(db, stale, 'scheduled', 'cancelled', {
    error: 'the definition schedule changed',
  })
}

/** True when `at` is one of the definition's schedule instants. */
function occursAt(def: DefinitionRow, at: Date): boolean {
  if (!def.schedule) return false
  const next = occurrenceStream(def.schedule, def.timezone, new Date(at.getTime() - 1), def).next()
  return !next.done && next.value === at.getTime()
}

/** Publish a new immutable version; new runs pin it, existing runs keep theirs. */
export function publishVersion(
  deps: DefinitionDeps,
  definitionId: number,
  program: unknown,
  actor: string,
): Promise<VersionRow> {
  return auditingRefusals(deps, actor, 'publishVersion', String(definitionId), () =>
    publish(deps, definitionId, program, actor),
  )
}

async function publish(
  deps: DefinitionDeps,
  definitionId: number,
  program: unknown,
  actor: string,
): Promise<VersionRow> {
  const def = await mustGet(deps.db, definitionId)
  if (def.state === 'archived')
    throw conflict(`Definition "${def.slug}" is archived; set it ACTIVE before publishing.`)
  const valid = validateProgram(program, deps.registry, { webhookAllow: deps.webhookAllow })
  const version = await versions.publish(deps.db, definitionId, valid, actor)
  await recordAudit(deps, actor, 'publishVersion', String(definitionId), 'ok', { version: version.version })
  return version
}

/**
 * ACTIVE, PAUSED or ARCHIVED, with what that means for the runs:
 * - PAUSED: the never-started runs the schedule made are withdrawn at once;
 *   runs a person scheduled stay and start at their time.
 * - ARCHIVED: the same withdrawal, and runs a person scheduled are cancelled
 *   ("definition archived"); refused with CONFLICT while a run is in progress.
 * - back to ACTIVE: the schedule resumes from now; nothing of the pause is made up.
 * The audit row says how many runs were withdrawn and cancelled.
 */
export function setDefinitionState(
  deps: DefinitionDeps,
  id: number,
  state: DefinitionState,
  actor: string,
): Promise<DefinitionRow> {
  return auditingRefusals(deps, actor, 'setDefinitionState', String(id), () =>
    setState(deps, id, state, actor),
  )
}

async function setState(
  deps: DefinitionDeps,
  id: number,
  state: DefinitionState,
  actor: string,
): Promise<DefinitionRow> {
  const current = await mustGet(deps.db, id)
  if (current.state === state) return current
  const change = await definitions.setState(deps.db, id, state)
  if (change === null) throw notFound('definition', id)
  if (!change.applied) {
    const n = change.inProgress
    throw new AppError(
      ERROR_CODES.CONFLICT,
      `Definition "${current.slug}" has ${n} run${n === 1 ? '' : 's'} in progress; cancel ${n === 1 ? 'it' : 'them'} or let ${n === 1 ? 'it' : 'them'} finish before archiving.`,
      { details: { state, runsInProgress: n } },
    )
  }
  await recordAudit(deps, actor, 'setDefinitionState', String(id), 'ok', {
    from: current.state,
    state,
    withdrawnRuns: change.withdrawn,
    cancelledRuns: change.cancelled,
  })
  if (state === 'active') deps.nudgeMaterialise?.()
  return mustGet(deps.db, id)
}
