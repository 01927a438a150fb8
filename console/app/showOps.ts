/** The documents of the calendar and of operating many shows (upcoming, bulk, retry, speed). */
import type { DateTime } from './operations.ts'

export type OccurrenceStatus = 'SCHEDULED' | 'BLACKOUT' | 'SKIPPED' | 'MOVED'

export interface UpcomingEntry {
  at: DateTime
  scope: string
  status: OccurrenceStatus
  reason: string | null
  movedTo: DateTime | null
  run: { id: string; status: string } | null
}

export const UPCOMING = /* GraphQL */ `
query Upcoming($id: ID!) {
  definition(id: $id) { id calendars { name } upcoming(count: 12) { at scope status reason movedTo run { id status } } }
}`
export interface UpcomingData {
  definition: { id: string; calendars: { name: string }[]; upcoming: UpcomingEntry[] } | null
}

export const SKIP_OCCURRENCE = /* GraphQL */ `
mutation SkipOccurrence($definitionId: ID!, $at: DateTime!, $scope: String, $reason: String!) {
  skipOccurrence(definitionId: $definitionId, at: $at, scope: $scope, reason: $reason) { status }
}`

export const BULK_RUNS = /* GraphQL */ `
mutation BulkRuns($action: BulkAction!, $filter: RunFilter!, $dryRun: Boolean, $reason: String) {
  bulkRuns(action: $action, filter: $filter, dryRun: $dryRun, reason: $reason) { bulkId matched applied dryRun }
}`
export interface BulkData {
  bulkRuns: { bulkId: string | null; matched: number; applied: number; dryRun: boolean }
}

export const RETRY_RUN = /* GraphQL */ `
mutation RetryRun($id: ID!, $fromStep: Int) { retryRun(id: $id, fromStep: $fromStep) { id } }`

export const RUN_ORIGINS = /* GraphQL */ `
query RunOrigins($id: ID!) { run(id: $id) { id speed startedAt rehearsal retryOf { id } bulkIds } }`
export interface RunOriginsData {
  run: {
    id: string
    speed: number
    startedAt: DateTime | null
    rehearsal: boolean
    retryOf: { id: string } | null
    bulkIds: string[]
  } | null
}
