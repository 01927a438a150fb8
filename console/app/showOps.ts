/**
 * The documents of the calendar and of operating many shows (upcoming, bulk,
 * retry, speed), typed from the schema like those in operations.ts.
 */
import { graphql, type ResultOf } from '../../src/client/graphql.ts'

export const UPCOMING = graphql(`
query Upcoming($id: ID!) {
  definition(id: $id) { id calendars { name } upcoming(count: 12) { at scope status reason movedTo run { id status } } }
}`)
export type UpcomingData = ResultOf<typeof UPCOMING>
export type UpcomingEntry = NonNullable<UpcomingData['definition']>['upcoming'][number]
export type OccurrenceStatus = UpcomingEntry['status']

export const SKIP_OCCURRENCE = graphql(`
mutation SkipOccurrence($definitionId: ID!, $at: DateTime!, $scope: String, $reason: String!) {
  skipOccurrence(definitionId: $definitionId, at: $at, scope: $scope, reason: $reason) { status }
}`)

export const BULK_RUNS = graphql(`
mutation BulkRuns($action: BulkAction!, $filter: RunFilter!, $dryRun: Boolean, $reason: String) {
  bulkRuns(action: $action, filter: $filter, dryRun: $dryRun, reason: $reason) { bulkId matched applied dryRun }
}`)
export type BulkData = ResultOf<typeof BULK_RUNS>

export const RETRY_RUN = graphql(`
mutation RetryRun($id: ID!, $fromStep: Int) { retryRun(id: $id, fromStep: $fromStep) { id } }`)

export const RUN_ORIGINS = graphql(`
query RunOrigins($id: ID!) { run(id: $id) { id speed startedAt rehearsal retryOf { id } bulkIds } }`)
export type RunOriginsData = ResultOf<typeof RUN_ORIGINS>
