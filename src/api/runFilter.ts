/**
 * `RunFilter` and the `runPage` cursor, as the API reads them.
 *
 * The cursor is opaque to clients: base64url of `r1:<scheduledFor ms>:<id>`,
 * the position of the last run of a page. It names a place in the
 * (scheduledFor, id) order, not an offset, so runs inserted anywhere never
 * shift the pages after it, and it stays valid while its run is deleted.
 * Anything that does not decode to exactly that shape is BAD_USER_INPUT; the
 * `r1` tag lets a later format be told apart.
 */
import type { RunPageFilter, RunPageKey } from '../../sql/runPage.ts'
import type { RunStatus } from '../../sql/states.ts'
import { badInput } from '../errors.ts'
import { parseOptionalId } from './args.ts'

/** `RunFilter` as GraphQL hands it over (enum values are the stored lowercase). */
export interface RunFilterInput {
  definitionId?: string | null
  statuses?: readonly RunStatus[] | null
  scope?: string | null
  scheduledAfter?: Date | null
  scheduledBefore?: Date | null
  rehearsal?: boolean | null
}

/** A checked filter; null fields are no condition. */
export interface RunFilter extends RunPageFilter {
  definitionId: number | null
  statuses: readonly RunStatus[] | null
  scope: string | null
  scheduledAfter: Date | null
  scheduledBefore: Date | null
  rehearsal: boolean | null
}

export const NO_FILTER: RunFilter = {
  definitionId: null,
  statuses: null,
  scope: null,
  scheduledAfter: null,
  scheduledBefore: null,
  rehearsal: null,
}

/** Longest scope a run can have (the column's length). */
const MAX_SCOPE = 191

export function parseRunFilter(input: RunFilterInput | null | undefined): RunFilter {
  if (!input) return NO_FILTER
  const filter: RunFilter = {
    definitionId: parseOptionalId(input.definitionId, 'filter.definitionId'),
    statuses: input.statuses ? [...new Set(input.statuses)] : null,
    scope: input.scope ?? null,
    scheduledAfter: input.scheduledAfter ?? null,
    scheduledBefore: input.scheduledBefore ?? null,
    rehearsal: input.rehearsal ?? null,
  }
  if (filter.scope !== null && filter.scope.length > MAX_SCOPE) {
    throw badInput(`filter.scope is at most ${MAX_SCOPE} characters; no run has a longer scope.`)
  }
  return filter
}

/** True when `run` satisfies every condition of `filter` (the change feed's test). */
export function matchesFilter(
  filter: RunFilter,
  run: {
    definitionId: number
    status: RunStatus
    scope: string
    scheduledFor: Date
    rehearsal: boolean
  },
): boolean {
  if (filter.definitionId !== null && run.definitionId !== filter.definitionId) return false
  if (filter.statuses !== null && !filter.statuses.includes(run.status)) return false
  if (filter.scope !== null && run.scope !== filter.scope) return false
  if (filter.rehearsal !== null && run.rehearsal !== filter.rehearsal) return false
  const at = run.scheduledFor.getTime()
  if (filter.scheduledAfter !== null && at < filter.scheduledAfter.getTime()) return false
  if (filter.scheduledBefore !== null && at >= filter.scheduledBefore.getTime()) return false
  return true
}

const CURSOR_TAG = 'r1'
const CURSOR_TEXT = /^r1:(\d{1,15}):(\d{1,15})$/
const BASE64URL = /^[A-Za-z0-9_-]{1,64}$/

export function encodeCursor(key: RunPageKey): string {
  return Buffer.from(`${CURSOR_TAG}:${key.scheduledFor.getTime()}:${key.id}`).toString('base64url')
}

/** The position a cursor names; BAD_USER_INPUT for anything this server did not hand out. */
export function decodeCursor(cursor: string): RunPageKey {
  const bad = () =>
    badInput(
      'after must be a pageInfo.endCursor from an earlier runPage answer; omit it to start at the newest run.',
    )
  if (!BASE64URL.test(cursor)) throw bad()
  const text = Buffer.from(cursor, 'base64url').toString('utf8')
  // Decoding forgives stray characters; only the exact encoding of a position is accepted.
  const m = CURSOR_TEXT.exec(text)
  if (!m || Buffer.from(text).toString('base64url') !== cursor) throw bad()
  const ms = Number(m[1])
  const id = Number(m[2])
  const scheduledFor = new Date(ms)
  if (!Number.isSafeInteger(id) || id < 1 || Number.isNaN(scheduledFor.getTime())) throw bad()
  return { scheduledFor, id }
}
