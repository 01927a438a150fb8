/**
 * Shows as code: apply a list of manifests (files in git) to the definitions,
 * and export the definitions as manifests again.
 *
 * apply: every manifest is validated first, and nothing is written unless all
 * of them are valid (every problem is answered, each with its path). Then each
 * definition that changes is changed in one transaction of its own, with one
 * audit row; a definition whose manifest says what it already is is not
 * touched at all (no version, no audit row), so applying the same files again
 * changes nothing. A version is published only when the program differs from
 * the current one (compared as canonical JSON: key order does not count).
 */
import * as audit from '../../sql/auditLog.ts'
import * as calendars from '../../sql/calendars.ts'
import { DB_ERRNO, isDbErrno, type Queryable } from '../../sql/db.ts'
import type { DefinitionPatch, DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as versions from '../../sql/eventVersions.ts'
import { AppError, conflict, ERROR_CODES } from '../errors.ts'
import { validateProgram } from '../runner/program.ts'
import { canonicalTimezone } from '../runner/schedule.ts'
import { MAX_DEFINITION_CALENDARS, resolveCalendarNames, setDefinitionCalendars } from './calendars.ts'
import { type DefinitionDeps, dropUnscheduledRuns, fieldProblems } from './definitions.ts'
import { canonicalJson, type Manifest, type ManifestProblem, parseManifests, toManifest } from './manifest.ts'

export type ApplyAction = 'create' | 'update' | 'unchanged' | 'archive'

export interface ApplyChange {
  slug: string
  action: ApplyAction
  /** The manifest fields that differ from the definition (every set field for a new one). */
  fields: string[]
  /** The version published by this change; null when the program stayed. */
  newVersion: number | null
}

export interface ApplyPlan {
  changes: ApplyChange[]
  /** False for a dry run: the plan says what would change, and nothing did. */
  applied: boolean
}

export interface ApplyOptions {
  dryRun?: boolean
  /** Archive the definitions (not archived yet) that no manifest names. */
  prune?: boolean
}

/** Problems listed in the error message; `extensions.problems` carries every one. */
const MESSAGE_PROBLEMS = 50

/** The fields a manifest sets besides the program, in the order they are reported. */
const FIELDS = [
  'title',
  'description',
  'schedule',
  'timezone',
  'scopes',
  'graceSeconds',
  'concurrencyKey',
  'overlap',
  'startsAt',
  'endsAt',
  'state',
  'calendars',
] as const satisfies readonly (keyof Manifest)[]
type Field = (typeof FIELDS)[number]

/** The defaults of a manifest: a new definition reports the fields it sets beyond them. */
const DEFAULTS: Record<Field, unknown> = {
  title: undefined,
  description: null,
  schedule: null,
  timezone: 'UTC',
  scopes: [''],
  graceSeconds: 300,
  concurrencyKey: null,
  overlap: 'allow_all',
  startsAt: null,
  endsAt: null,
  state: 'active',
  calendars: [],
}

function same(a: unknown, b: unknown): boolean {
  if (a instanceof Date || b instanceof Date)
    return a instanceof Date && b instanceof Date && a.getTime() === b.getTime()
  return canonicalJson(a) === canonicalJson(b)
}

/** A manifest in the form the definition stores it (canonical zone, program as validated). */
interface Target {
  manifest: Manifest
  values: Record<Field, unknown>
  program: unknown
}

/** What changes from `current` to `target`: fields (the program last, as "program") and whether the program does. */
interface Current {
  def: DefinitionRow
  program: unknown
  /** The names of the calendars it observes, sorted. */
  calendars: string[]
}

function currentValue(current: Current, field: Field): unknown {
  return field === 'calendars' ? current.calendars : current.def[field]
}

function diff(target: Target, current: Current | null): { fields: string[]; programChanged: boolean } {
  if (!current) {
    const fields: string[] = FIELDS.filter((f) => f === 'title' || !same(target.values[f], DEFAULTS[f]))
    return { fields: [...fields, 'program'], programChanged: true }
  }
  const fields: string[] = FIELDS.filter((f) => !same(target.values[f], currentValue(current, f)))
  const programChanged = canonicalJson(target.program) !== canonicalJson(current.program)
  if (programChanged) fields.push('program')
  return { fields, programChanged }
}

function actionOf(current: DefinitionRow | null, target: Target, fields: string[]): ApplyAction {
  if (!current) return 'create'
  if (fields.length === 0) return 'unchanged'
  return target.values.state === 'archived' && current.state !== 'archived' ? 'archive' : 'update'
}

function refuse(problems: ManifestProblem[]): AppError {
  const shown = problems.slice(0, MESSAGE_PROBLEMS).map((p) => `${p.path || 'manifests'}: ${p.message}`)
  if (problems.length > MESSAGE_PROBLEMS) shown.push(`… and ${problems.length - MESSAGE_PROBLEMS} more`)
  const n = problems.length
  return new AppError(
    ERROR_CODES.BAD_USER_INPUT,
    `${n} problem${n === 1 ? '' : 's'} in the manifests; nothing was applied: ${shown.join('; ')}`,
    { details: { problems: problems.slice(0, 200) }, extensions: { problems } },
  )
}

/** "field: message" (from the field rules) as a problem at `[index].field`. */
function fieldProblem(index: number, text: string): ManifestProblem {
  const at = text.indexOf(': ')
  return at < 0
    ? { path: `[${index}]`, message: text }
    : { path: `[${index}].${text.slice(0, at)}`, message: text.slice(at + 2) }
}

/** Each definition's current version (program and number), by definition id. */
async function currentVersions(
  db: Queryable,
  defs: readonly DefinitionRow[],
): Promise<Map<number, { program: unknown; version: number }>> {
  const ids = defs.map((d) => d.currentVersionId).filter((id): id is number => id !== null)
  const rows = await versions.getByIds(db, ids)
  return new Map(rows.map((v) => [v.definitionId, { program: v.program, version: v.version }]))
}

/**
 * Apply manifests: a plan of every change (in manifest order, then the
 * definitions pruned), carried out unless `dryRun`.
 * @throws AppError BAD_USER_INPUT with every problem (nothing written);
 * CONFLICT when a definition to archive has runs in progress (nothing written).
 */
export async function applyDefinitions(
  deps: DefinitionDeps,
  input: unknown,
  opts: ApplyOptions,
  actor: string,
): Promise<ApplyPlan> {
  try {
    return await applyAll(deps, input, opts, actor)
  } catch (err) {
    // A refusal is audited once (a dry run writes nothing, not even that).
    if (err instanceof AppError && !opts.dryRun) {
      await audit.record(deps.db, {
        actor,
        action: 'applyDefinitions',
        targetType: 'definition',
        targetId: null,
        outcome: 'refused',
        detail: { code: err.code, reason: err.message.slice(0, 1000) },
      })
    }
    throw err
  }
}

async function applyAll(
  deps: DefinitionDeps,
  input: unknown,
  opts: ApplyOptions,
  actor: string,
): Promise<ApplyPlan> {
  const { manifests, problems, fields } = parseManifests(input, deps.registry, {
    webhookAllow: deps.webhookAllow,
  })
  for (const f of fields)
    for (const text of fieldProblems(f.fields)) problems.push(fieldProblem(f.index, text))
  const targets: Target[] = []
  for (const m of manifests) {
    let program: unknown = m.program
    try {
      program = validateProgram(m.program, deps.registry, { webhookAllow: deps.webhookAllow })
    } catch {
      // Reported (with paths) by parseManifests already.
    }
    const values = Object.fromEntries(FIELDS.map((f) => [f, m[f]])) as Record<Field, unknown>
    values.title = m.title.trim()
    values.timezone = canonicalTimezone(m.timezone) ?? m.timezone
    targets.push({ manifest: m, values, program })
  }
  problems.push(...(await calendarProblems(deps, manifests)))
  if (problems.length > 0) throw refuse(sortByPath(problems))

  const existing = await definitions.list(deps.db, { includeArchived: true })
  const bySlug = new Map(existing.map((d) => [d.slug, d]))
  const current = await currentVersions(deps.db, existing)
  const observed = await calendarNames(deps.db, existing)
  const changes: ApplyChange[] = []
  const toWrite: { target: Target | null; def: DefinitionRow | null; change: ApplyChange }[] = []
  for (const target of targets) {
    const def = bySlug.get(target.manifest.slug) ?? null
    const version = def ? current.get(def.id) : undefined
    const { fields, programChanged } = diff(
      target,
      def && { def, program: version?.program ?? null, calendars: observed.get(def.id) ?? [] },
    )
    const action = actionOf(def, target, fields)
    if (def?.state === 'archived' && target.values.state === 'archived' && fields.length > 0)
      problems.push({
        path: `[${target.manifest.index}].state`,
        message: `"${def.slug}" is archived; set state ACTIVE (or PAUSED) to change ${fields.join(', ')}`,
      })
    // What a dry run answers: the version a publish would make.
    const newVersion = programChanged ? (version?.version ?? 0) + 1 : null
    const change: ApplyChange = { slug: target.manifest.slug, action, fields, newVersion }
    changes.push(change)
    if (action !== 'unchanged') toWrite.push({ target, def, change })
  }
  if (opts.prune) {
    const named = new Set(targets.map((t) => t.manifest.slug))
    for (const def of existing) {
      if (named.has(def.slug) || def.state === 'archived') continue
      const change: ApplyChange = { slug: def.slug, action: 'archive', fields: ['state'], newVersion: null }
      changes.push(change)
      toWrite.push({ target: null, def, change })
    }
  }
  if (problems.length > 0) throw refuse(problems)
  await refuseArchivesInProgress(deps, toWrite)
  if (opts.dryRun) return { changes, applied: false }
  for (const item of toWrite) {
    const { id, ...done } = await deps.db.transaction(
      (tx) => applyOne(deps, tx, item.target, item.def, actor),
      { retryable: true },
    )
    Object.assign(item.change, done)
    // Calendars are set the way updateDefinition sets them (their own short
    // transaction, then the runs a new blackout covers are withdrawn).
    if (item.target && id !== null && done.fields.includes('calendars')) {
      const names = item.target.values.calendars as string[]
      await setDefinitionCalendars(deps, id, await resolveCalendarNames(deps.db, names))
    }
  }
  if (toWrite.length > 0) deps.nudgeMaterialise?.()
  return { changes, applied: true }
}

/** Each definition's calendar names, sorted (definitions with none are absent). */
async function calendarNames(db: Queryable, defs: readonly DefinitionRow[]): Promise<Map<number, string[]>> {
  const rows = await calendars.ofDefinitions(
    db,
    defs.map((d) => d.id),
  )
  return new Map([...rows].map(([id, list]) => [id, list.map((c) => c.name).sort()]))
}

/** Calendars that do not exist, repeat, or are too many: each at its manifest. */
async function calendarProblems(
  deps: DefinitionDeps,
  manifests: readonly Manifest[],
): Promise<ManifestProblem[]> {
  const problems: ManifestProblem[] = []
  const names = [...new Set(manifests.flatMap((m) => m.calendars))]
  const known = new Set((await calendars.getByNames(deps.db, names)).map((c) => c.name))
  for (const m of manifests) {
    const path = `[${m.index}].calendars`
    if (m.calendars.length > MAX_DEFINITION_CALENDARS)
      problems.push({ path, message: `at most ${MAX_DEFINITION_CALENDARS} calendars per definition` })
    if (new Set(m.calendars).size !== m.calendars.length)
      problems.push({ path, message: 'must not repeat a calendar' })
    const unknown = m.calendars.filter((n) => !known.has(n))
    if (unknown.length > 0)
      problems.push({
        path,
        message: `no calendar named ${unknown.map((n) => JSON.stringify(n.slice(0, 100))).join(', ')}; create it first (createCalendar)`,
      })
  }
  return problems
}

function sortByPath(problems: ManifestProblem[]): ManifestProblem[] {
  const index = (p: ManifestProblem) => Number(/^\[(\d+)\]/.exec(p.path)?.[1] ?? -1)
  return problems
    .map((p, order) => ({ p, order }))
    .sort((a, b) => index(a.p) - index(b.p) || a.order - b.order)
    .map(({ p }) => p)
}

/** Archiving waits for runs in progress, as setDefinitionState does: refuse before anything is written. */
async function refuseArchivesInProgress(
  deps: DefinitionDeps,
  toWrite: { target: Target | null; def: DefinitionRow | null; change: ApplyChange }[],
): Promise<void> {
  const archiving = toWrite.filter((w) => w.change.action === 'archive' && w.def).map((w) => w.def)
  const counts = await definitions.inProgressCounts(
    deps.db,
    archiving.map((d) => (d as DefinitionRow).id),
  )
  const busy = archiving.filter((d) => (counts.get((d as DefinitionRow).id) ?? 0) > 0) as DefinitionRow[]
  if (busy.length === 0) return
  const named = busy.map((d) => {
    const n = counts.get(d.id) ?? 0
    return `"${d.slug}" has ${n} run${n === 1 ? '' : 's'} in progress`
  })
  throw conflict(
    `Cannot archive: ${named.join('; ')}. Cancel them or let them finish, then apply again; nothing was applied.`,
    { runsInProgress: Object.fromEntries(busy.map((d) => [d.slug, counts.get(d.id)])) },
  )
}

/**
 * One definition's change, in the caller's transaction. The definition is read
 * again here, so a retried transaction decides from what it sees itself.
 */
async function applyOne(
  deps: DefinitionDeps,
  tx: Queryable,
  target: Target | null,
  planned: DefinitionRow | null,
  actor: string,
): Promise<Done> {
  const slug = target?.manifest.slug ?? (planned as DefinitionRow).slug
  const def = await definitions.getBySlug(tx, slug)
  if (!def) {
    if (!target) return { id: null, action: 'unchanged', fields: [], newVersion: null }
    return create(tx, target, actor)
  }
  if (!target) return { id: def.id, ...(await archive(tx, def, actor)) }
  const [version] = def.currentVersionId ? await versions.getByIds(tx, [def.currentVersionId]) : []
  const observed = (await calendarNames(tx, [def])).get(def.id) ?? []
  const { fields, programChanged } = diff(target, {
    def,
    program: version?.program ?? null,
    calendars: observed,
  })
  const action = actionOf(def, target, fields)
  if (action === 'unchanged') return { id: def.id, action, fields, newVersion: null }
  const state = target.values.state as DefinitionRow['state']
  let stateChange: definitions.StateChange | null = null
  // A state change goes first: it takes the definition's run guard (what an archive must hold).
  if (state !== def.state) {
    stateChange = await definitions.setStateIn(tx, def.id, state)
    if (stateChange && !stateChange.applied) {
      const n = stateChange.inProgress
      throw conflict(
        `Definition "${slug}" has ${n} run${n === 1 ? '' : 's'} in progress; cancel or let them finish, then apply again.`,
      )
    }
  }
  const patch: DefinitionPatch = {}
  for (const f of FIELDS)
    if (f !== 'state' && f !== 'calendars' && fields.includes(f))
      Object.assign(patch, { [f]: target.values[f] })
  if (Object.keys(patch).length > 0) await definitions.update(tx, def.id, patch)
  if (patch.graceSeconds !== undefined) await runs.resetMissedAt(tx, def.id)
  let newVersion: number | null = null
  if (programChanged) newVersion = (await versions.publishIn(tx, def.id, target.program, actor)).version
  let cancelledRuns = 0
  if (definitions.reschedules(patch) && state === 'active') {
    const updated = await definitions.getById(tx, def.id)
    if (updated) cancelledRuns = await dropUnscheduledRuns(deps, updated, tx)
  }
  await audit.record(tx, {
    actor,
    action: 'applyDefinitions',
    targetType: 'definition',
    targetId: String(def.id),
    outcome: 'ok',
    detail: {
      slug,
      change: action,
      fields,
      newVersion,
      cancelledRuns,
      ...(stateChange?.applied
        ? { from: def.state, withdrawnRuns: stateChange.withdrawn, cancelledByState: stateChange.cancelled }
        : {}),
    },
  })
  return { id: def.id, action, fields, newVersion }
}

/** What one definition's transaction did; `id` is the definition's (null: nothing to do). */
type Done = Pick<ApplyChange, 'action' | 'fields' | 'newVersion'> & { id: number | null }

async function create(tx: Queryable, target: Target, actor: string): Promise<Done> {
  const v = target.values
  let id: number
  try {
    id = await definitions.create(tx, {
      slug: target.manifest.slug,
      title: v.title as string,
      description: v.description as string | null,
      schedule: v.schedule as string | null,
      timezone: v.timezone as string,
      graceSeconds: v.graceSeconds as number,
      concurrencyKey: v.concurrencyKey as string | null,
      scopes: v.scopes as string[],
      state: v.state as DefinitionRow['state'],
      overlap: v.overlap as DefinitionRow['overlap'],
      startsAt: v.startsAt as Date | null,
      endsAt: v.endsAt as Date | null,
    })
  } catch (err) {
    if (isDbErrno(err, DB_ERRNO.DUP_ENTRY))
      throw conflict(`"${target.manifest.slug}" was created by someone else meanwhile; apply again.`)
    throw err
  }
  const version = await versions.publishIn(tx, id, target.program, actor)
  const { fields } = diff(target, null)
  await audit.record(tx, {
    actor,
    action: 'applyDefinitions',
    targetType: 'definition',
    targetId: String(id),
    outcome: 'ok',
    detail: { slug: target.manifest.slug, change: 'create', fields, newVersion: version.version },
  })
  return { id, action: 'create', fields, newVersion: version.version }
}

async function archive(
  tx: Queryable,
  def: DefinitionRow,
  actor: string,
): Promise<Pick<ApplyChange, 'action' | 'fields' | 'newVersion'>> {
  if (def.state === 'archived') return { action: 'unchanged', fields: [], newVersion: null }
  const change = await definitions.setStateIn(tx, def.id, 'archived')
  if (change && !change.applied)
    throw conflict(
      `Definition "${def.slug}" has ${change.inProgress} run(s) in progress; cancel or let them finish, then apply again.`,
    )
  await audit.record(tx, {
    actor,
    action: 'applyDefinitions',
    targetType: 'definition',
    targetId: String(def.id),
    outcome: 'ok',
    detail: {
      slug: def.slug,
      change: 'archive',
      fields: ['state'],
      pruned: true,
      from: def.state,
      withdrawnRuns: change?.applied ? change.withdrawn : 0,
      cancelledByState: change?.applied ? change.cancelled : 0,
    },
  })
  return { action: 'archive', fields: ['state'], newVersion: null }
}

/**
 * The definitions as manifests: the ones named (in that order; NOT_FOUND
 * names any unknown), or every one not archived, by slug.
 */
export async function exportDefinitions(
  deps: Pick<DefinitionDeps, 'db'>,
  slugs: readonly string[] | null,
): Promise<Record<string, unknown>[]> {
  let defs: DefinitionRow[]
  if (slugs === null) defs = await definitions.list(deps.db)
  else {
    const all = new Map((await definitions.list(deps.db, { includeArchived: true })).map((d) => [d.slug, d]))
    const unknown = slugs.filter((s) => !all.has(s))
    if (unknown.length > 0)
      throw new AppError(
        ERROR_CODES.NOT_FOUND,
        `No definition with slug ${unknown.map((s) => JSON.stringify(s.slice(0, 100))).join(', ')} exists.`,
      )
    defs = [...new Set(slugs)].map((s) => all.get(s) as DefinitionRow)
  }
  const current = await currentVersions(deps.db, defs)
  const observed = await calendarNames(deps.db, defs)
  return defs.map((d) => toManifest(d, current.get(d.id)?.program ?? null, observed.get(d.id) ?? []))
}
