/**
 * The one place a new run's fields are assembled from its definition, for
 * every way a run is made: a person's `startRun` (or a rehearsal), a backfill
 * and the schedule's materialisation. What they share (the version it pins,
 * the zone, the resolved concurrency key, the overlap policy) is decided here
 * once; what differs is what the caller says.
 */
import type { DefinitionRow } from '../../sql/eventDefinitions.ts'
import * as definitions from '../../sql/eventDefinitions.ts'
import type { NewRun } from '../../sql/eventRuns/index.ts'
import { renderTemplate } from './template.ts'

/** The concurrency key of one run: the definition's template rendered for that run. */
export function resolveConcurrencyKey(
  template: string | null,
  run: { scope: string; scheduledFor: Date; params: Record<string, unknown> | null },
  def: { title: string; slug: string },
): string | null {
  if (!template) return null
  const key = String(
    renderTemplate(template, {
      run: { id: '', scope: run.scope, scheduledFor: run.scheduledFor },
      params: run.params,
      definition: def,
    }),
  ).slice(0, 255)
  return key === '' ? null : key
}

/** What a new run takes from its definition. */
export type RunDefinition = Pick<
  DefinitionRow,
  'id' | 'currentVersionId' | 'timezone' | 'concurrencyKey' | 'overlap' | 'title' | 'slug'
>

/** What the maker of a run says about it. */
export interface RunRequest {
  scope: string
  scheduledFor: Date
  /** `schedule`, or the actor who asked for it. */
  startedBy: string
  params?: Record<string, unknown> | null
  /** A rehearsal takes no concurrency key. @default false */
  rehearsal?: boolean
  /** Started however late, never missed for lateness (a backfill). @default false */
  graceExempt?: boolean
}

/** A new run of `def`'s current version (the caller has checked that it has one). */
export function newRun(def: RunDefinition, request: RunRequest): NewRun {
  const { scope, scheduledFor } = request
  if (def.currentVersionId === null) throw new Error(`definition ${def.id} has no published version`)
  const params = request.params ?? null
  const rehearsal = request.rehearsal === true
  return {
    definitionId: def.id,
    versionId: def.currentVersionId,
    scope,
    scheduledFor,
    timezone: def.timezone,
    concurrencyKey: rehearsal
      ? null
      : resolveConcurrencyKey(def.concurrencyKey, { scope, scheduledFor, params }, def),
    params,
    rehearsal,
    startedBy: request.startedBy,
    overlap: definitions.runOverlap(def.overlap),
    graceExempt: request.graceExempt === true,
  }
}
