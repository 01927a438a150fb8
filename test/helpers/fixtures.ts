/**
 * Test fixtures for the SQL layer: rows made through the repositories (never raw
 * SQL where a repository function exists), plus the few raw helpers tests need to
 * inspect rows or to set up states no repository offers.
 */
import { randomBytes } from 'node:crypto'
import type { Db, Queryable } from '../../sql/db.ts'
import type { DefinitionRow, NewDefinition } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import type { NewRun, RunListRow } from '../../sql/eventRuns/index.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import type { StepRow, StepSpec } from '../../sql/eventSteps/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import type { VersionRow } from '../../sql/eventVersions.ts'
import * as versions from '../../sql/eventVersions.ts'
import type { ChannelFields } from '../../sql/notifications/channels.ts'

let counter = 0
/** A value unique within this process and across concurrent test files. */
export function unique(prefix = 'fx'): string {
  counter++
  return `${prefix}-${counter}-${randomBytes(3).toString('hex')}`
}

export const sleepMs = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** `base` (default: now) shifted by `offsetMs`, as a Date. */
export function at(offsetMs: number, base: Date | number = Date.now()): Date {
  return new Date((typeof base === 'number' ? base : base.getTime()) + offsetMs)
}

/** A minimal valid-looking program; the SQL layer stores it as opaque JSON. */
export const SAMPLE_PROGRAM = {
  phases: [{ name: 'main', steps: [{ kind: 'core.log', params: { message: 'hello' } }] }],
}

/** A definition with one published version (the current one). */
export interface DefinitionFixture {
  def: DefinitionRow
  version: VersionRow
}

export type DefinitionOverrides = Partial<NewDefinition> & {
  /** The program of the first version. @default SAMPLE_PROGRAM */
  program?: unknown
}

/** Create a definition through the repository and publish its first version. */
export async function makeDefinition(
  db: Db,
  overrides: DefinitionOverrides = {},
): Promise<DefinitionFixture> {
  const { program, ...rest } = overrides
  const id = await definitions.create(db, {
    slug: unique('def'),
    title: 'Fixture event',
    description: null,
    schedule: null,
    timezone: 'UTC',
    graceSeconds: 300,
    concurrencyKey: null,
    scopes: [''],
    state: 'active',
    ...rest,
  })
  const version = await versions.publish(db, id, program ?? SAMPLE_PROGRAM, 'fixtures')
  const def = await definitions.getById(db, id)
  if (!def) throw new Error(`fixture definition ${id} vanished`)
  return { def, version }
}

export type RunOverrides = Partial<NewRun> & {
  /** The definition (and its current version) the run belongs to; created when absent. */
  definition?: DefinitionFixture
}

/**
 * What {@link runs.materialise} takes, filled from a definition: due one second
 * ago, a scope unique to this call (so defaults never collide on the occurrence
 * key), the definition's key.
 */
export function newRun(fx: DefinitionFixture, overrides: Partial<NewRun> = {}): NewRun {
  return {
    definitionId: fx.def.id,
    versionId: fx.version.id,
    scope: unique('scope'),
    scheduledFor: at(-1000),
    timezone: 'UTC',
    concurrencyKey: fx.def.concurrencyKey,
    params: null,
    rehearsal: false,
    startedBy: 'schedule',
    ...overrides,
  }
}

/** Materialise one run through the repository and read it back. */
export async function makeRun(db: Db, overrides: RunOverrides = {}): Promise<RunListRow> {
  const { definition, ...rest } = overrides
  const fx = definition ?? (await makeDefinition(db))
  const id = await runs.materialise(db, newRun(fx, rest))
  if (id === null)
    throw new Error('makeRun: the occurrence already existed; pass a distinct scope/scheduledFor')
  const row = await runs.getById(db, id)
  if (!row) throw new Error(`fixture run ${id} vanished`)
  return row
}

/** `n` step specs with seq 0..n-1 in one phase. */
export function stepSpecs(n: number, overrides: Partial<StepSpec> = {}): StepSpec[] {
  return Array.from({ length: n }, (_, i) => ({
    seq: i,
    phaseIndex: 0,
    phase: 'main',
    ending: false,
    kind: 'core.log',
    params: { message: `step ${i}` },
    maxAttempts: 5,
    backoffMs: 1000,
    timeoutMs: 30_000,
    onError: 'fail' as const,
    ...overrides,
  }))
}

/** A run with `n` expanded steps (all pending). */
export async function makeRunWithSteps(
  db: Db,
  n: number,
  overrides: RunOverrides = {},
): Promise<{ run: RunListRow; steps: StepRow[] }> {
  const run = await makeRun(db, overrides)
  await steps.expand(db, [{ runId: run.id, specs: stepSpecs(n) }])
  return { run, steps: await steps.listForRun(db, run.id) }
}

/**
 * A run with `n` pending steps, moved to `running` as its start would: a step
 * begins only while its run runs, as the runner begins them.
 */
export async function makeRunningRunWithSteps(
  db: Db,
  n: number,
  overrides: RunOverrides = {},
): Promise<{ run: RunListRow; steps: StepRow[] }> {
  const made = await makeRunWithSteps(db, n, overrides)
  await db.run("UPDATE event_runs SET status = 'running', started_at = NOW(3) WHERE id = ?", [made.run.id])
  return made
}

/**
 * Empty the run-side tables (keeps definitions and versions), for tests whose
 * queries span every run (findDue, findMissed, list). Raw SQL: no repository
 * deletes runs.
 */
export async function resetRuns(db: Queryable): Promise<void> {
  await db.run('DELETE FROM concurrency_locks')
  // No foreign key cascades from a run to its rows (migration 0024).
  await db.run('DELETE FROM cue_links')
  await db.run('DELETE FROM cue_ladders')
  await db.run('DELETE FROM event_run_logs')
  await db.run('DELETE FROM event_run_steps')
  await db.run('DELETE FROM event_run_retries')
  await db.run('DELETE FROM event_runs')
}

/** Row count of a table (inspection only). */
export async function countRows(db: Queryable, table: string, where = '1=1', args: (string | number)[] = []) {
  const [row] = await db.query<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table} WHERE ${where}`, args)
  return Number(row?.n ?? 0)
}

/** A run's raw row, with the timestamps also as exact DATETIME(3) text. */
export async function rawRun(db: Queryable, id: number) {
  const [row] = await db.query<Record<string, unknown>>(
    `SELECT *, CAST(updated_at AS CHAR) AS updated_at_text, CAST(ended_at AS CHAR) AS ended_at_text
       FROM event_runs WHERE id = ?`,
    [id],
  )
  if (!row) throw new Error(`run ${id} not found`)
  return row
}

/** The concurrency lock rows, by key (inspection only). */
export async function locks(db: Queryable): Promise<Map<string, number>> {
  const rows = await db.query<{ lock_key: string; run_id: number }>(
    'SELECT lock_key, run_id FROM concurrency_locks',
  )
  return new Map(rows.map((r) => [r.lock_key, Number(r.run_id)]))
}

/** Fisher–Yates on a copy. */
export function shuffled<T>(items: readonly T[]): T[] {
  const a = [...items]
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[a[i], a[j]] = [a[j] as T, a[i] as T]
  }
  return a
}

/**
 * A notification channel's fields: an enabled webhook to the loopback's port 9
 * (it refuses at once) listening for RUN_FAILED, unless `extra` says otherwise.
 */
export function channelFields(name: string, extra: Partial<ChannelFields> = {}): ChannelFields {
  return {
    name,
    kind: 'WEBHOOK',
    target: 'http://127.0.0.1:9/x',
    events: ['RUN_FAILED'],
    definitionIds: null,
    teams: null,
    lateStartSeconds: 60,
    signingSecret: null,
    enabled: true,
    ...extra,
  }
}
