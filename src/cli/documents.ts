/** The GraphQL documents the `showrunner` client commands send, typed from the schema. */
import { graphql } from '../client/graphql.ts'

export const APPLY = graphql(`
mutation Apply($manifests: JSON!, $dryRun: Boolean, $prune: Boolean) {
  applyDefinitions(manifests: $manifests, dryRun: $dryRun, prune: $prune) {
    applied changes { slug action fields newVersion }
  }
}`)

export const EXPORT = graphql(`query Export($slugs: [String!]) { exportDefinitions(slugs: $slugs) }`)

export const DEFINITION_SLUGS = graphql(
  `query DefinitionSlugs { definitions(includeArchived: true) { slug } }`,
)

export const DEFINITION_ID = graphql(`query DefinitionId($slug: String!) { definition(slug: $slug) { id } }`)

const RUN_ROW = graphql(`
fragment RunRow on EventRun {
  id scope status health currentPhase waitingSteps scheduledFor startedAt endedAt rehearsal lastError
  definition { slug }
}`)

export const RUNS = graphql(
  `
query Runs($filter: RunFilter, $first: Int) {
  runPage(filter: $filter, first: $first) { nodes { ...RunRow } pageInfo { hasNextPage } }
}`,
  [RUN_ROW],
)

export const START_RUN = graphql(
  `
mutation StartRun($definitionId: ID!, $scope: String, $at: DateTime, $params: JSON, $rehearsal: Boolean) {
  startRun(definitionId: $definitionId, scope: $scope, at: $at, params: $params, rehearsal: $rehearsal) { ...RunRow }
}`,
  [RUN_ROW],
)

export const PAUSE_RUN = graphql(
  `mutation PauseRun($id: ID!) { pauseRun(id: $id) { applied run { ...RunRow } } }`,
  [RUN_ROW],
)
export const RESUME_RUN = graphql(
  `mutation ResumeRun($id: ID!) { resumeRun(id: $id) { applied run { ...RunRow } } }`,
  [RUN_ROW],
)
export const CANCEL_RUN = graphql(
  `mutation CancelRun($id: ID!, $reason: String) { cancelRun(id: $id, reason: $reason) { applied run { ...RunRow } } }`,
  [RUN_ROW],
)

export const CUES = graphql(`
query Cues($limit: Int, $mine: Boolean) {
  waitingSteps(limit: $limit, mine: $mine) {
    id phase kind params startedAt
    cue { assignees deadlineAt }
    run { id scope status definition { slug } }
  }
}`)

const STEP_ROW = graphql(`fragment StepRow on RunStep { id kind status result run { id status } }`)

export const RESOLVE_CUE = graphql(
  `mutation ResolveCue($stepId: ID!, $note: String) { resolveCue(stepId: $stepId, note: $note) { applied step { ...StepRow } } }`,
  [STEP_ROW],
)
export const RETRY_STEP_NOW = graphql(
  `mutation RetryStepNow($stepId: ID!) { retryStepNow(stepId: $stepId) { applied step { ...StepRow attempts maxAttempts } } }`,
  [STEP_ROW],
)
export const SKIP_STEP = graphql(
  `mutation SkipStep($stepId: ID!, $reason: String) { skipStep(stepId: $stepId, reason: $reason) { applied step { ...StepRow } } }`,
  [STEP_ROW],
)

export const RUN_STATUS = graphql(`
subscription RunStatus($id: ID!) { runStatus(id: $id) { id status health currentPhase waitingSteps updatedAt } }`)

export const RUN_END = graphql(`query RunEnd($id: ID!) { run(id: $id) { id status lastError } }`)

export const HEALTH = graphql(`
query Health {
  health { ok database degradedRuns waitingSteps oldestWaitingStepAt runsByStatus runners { id host tickLagMs lastTickAt } }
}`)

const KEY_ROW = graphql(`
fragment KeyRow on ApiKey { id name role teams prefix createdAt createdBy expiresAt lastUsedAt revokedAt }`)

export const API_KEYS = graphql(
  `query ApiKeys($includeRevoked: Boolean) { apiKeys(includeRevoked: $includeRevoked) { ...KeyRow } }`,
  [KEY_ROW],
)

export const CREATE_API_KEY = graphql(
  `
mutation CreateApiKey($name: String!, $role: Role!, $teams: [String!], $expiresAt: DateTime) {
  createApiKey(name: $name, role: $role, teams: $teams, expiresAt: $expiresAt) { key { ...KeyRow } secret }
}`,
  [KEY_ROW],
)

export const REVOKE_API_KEY = graphql(
  `mutation RevokeApiKey($id: ID!) { revokeApiKey(id: $id) { ...KeyRow } }`,
  [KEY_ROW],
)

export const RETRY_RUN = graphql(
  `
mutation RetryRun($id: ID!, $fromStep: Int) {
  retryRun(id: $id, fromStep: $fromStep) {
    ...RunRow
    retryOf { id status }
    steps { seq status }
  }
}`,
  [RUN_ROW],
)

export const BULK_RUNS = graphql(`
mutation BulkRuns($action: BulkAction!, $filter: RunFilter!, $dryRun: Boolean, $reason: String) {
  bulkRuns(action: $action, filter: $filter, dryRun: $dryRun, reason: $reason) { applied bulkId dryRun matched }
}`)

const OCCURRENCE_ROW = graphql(`
fragment OccurrenceRow on Occurrence { at movedTo reason scope status run { id status scheduledFor } }`)

export const SKIP_OCCURRENCE = graphql(
  `
mutation SkipOccurrence($definitionId: ID!, $at: DateTime!, $reason: String!, $scope: String) {
  skipOccurrence(definitionId: $definitionId, at: $at, reason: $reason, scope: $scope) { ...OccurrenceRow }
}`,
  [OCCURRENCE_ROW],
)

export const MOVE_OCCURRENCE = graphql(
  `
mutation MoveOccurrence($definitionId: ID!, $at: DateTime!, $to: DateTime!, $reason: String, $scope: String) {
  moveOccurrence(definitionId: $definitionId, at: $at, to: $to, reason: $reason, scope: $scope) { ...OccurrenceRow }
}`,
  [OCCURRENCE_ROW],
)

export const CALENDARS = graphql(`
query Calendars { calendars { id name timezone entries { from to yearly label } } }`)
