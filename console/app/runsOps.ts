/**
 * The documents of the runs page (every run, filtered and paged, and the bulk
 * actions over a filter), typed from the schema like those in operations.ts.
 */
import { graphql, type ResultOf, type VariablesOf } from '../../src/client/graphql.ts'
import { RUN_CARD } from './operations.ts'

/** Rows per page of the runs page. */
export const RUNS_PAGE_SIZE = 50

export const RUNS = graphql(
  `
query Runs($filter: RunFilter, $first: Int!, $after: String) {
  runPage(filter: $filter, first: $first, after: $after) {
    nodes { ...RunCard } pageInfo { hasNextPage endCursor }
  }
}`,
  [RUN_CARD],
)
export type RunsData = ResultOf<typeof RUNS>
export type RunFilterInput = NonNullable<VariablesOf<typeof RUNS>['filter']>

/** What the filter's "show" list offers. */
export const RUN_FILTER_CHOICES = graphql(`
query RunFilterChoices { definitions(includeArchived: true) { id slug title } }`)

/** A change to any run the filter selects: the page reads its rows again. */
export const RUNS_LIVE = graphql(`
subscription RunsLive($filter: RunFilter) { runChanges(filter: $filter) { id status } }`)
