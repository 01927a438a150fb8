/**
 * Every GraphQL operation the console sends. Each answer's type is derived
 * from schema/schema.graphql by the shared typed client (src/client), so a
 * field the console selects that the schema lacks fails `npm run typecheck`.
 */
import { graphql, type ResultOf } from '../../src/client/graphql.ts'

export type Role = ResultOf<typeof VIEWER>['viewer']['role']
export type RunStatus = RunCard['status']
export type RunHealth = RunCard['health']
export type StepStatus = StepCard['status']
export type DefinitionState = DefinitionCard['state']

export const VIEWER = graphql(`query Viewer { viewer { role actor } }`)
export type ViewerData = ResultOf<typeof VIEWER>

export const RUN_CARD = graphql(`
fragment RunCard on EventRun {
  id scope status health currentPhase waitingSteps scheduledFor startedAt endedAt rehearsal lastError
  definition { id slug title }
}`)
export type RunCard = ResultOf<typeof RUN_CARD>

const HEALTH_FIELDS = graphql(`
fragment HealthFields on Health {
  ok database waitingSteps oldestWaitingStepAt degradedRuns
  runners { id host tickLagMs lastTickAt }
}`)
export type HealthData = ResultOf<typeof HEALTH_FIELDS>

/** Runs per request: the query budget weighs `first` times what each run selects (a run with its steps weighs up to 1,000 steps, the program limit). */
export const IN_PROGRESS_PAGE_SIZE = 100
/** A run with all its steps and their cue ladders weighs about 3,000 (MAX_QUERY_COST is 20,000). */
export const STANDBY_PAGE_SIZE = 5
/** Runs waiting to start, a page: a card and the program they will run (no steps yet). */
export const SCHEDULED_PAGE_SIZE = 100
/** How far ahead the board and stand-by look for runs waiting to start. */
export const SCHEDULED_HORIZON_MS = 48 * 3600_000

/** A page of the runs in progress (the server's query budget weighs `first`, so long lists come in pages). */
export const IN_PROGRESS_PAGE = graphql(
  `
query InProgress($first: Int!, $after: String) {
  runPage(filter: { statuses: [STARTING, RUNNING, PAUSED, ENDING] }, first: $first, after: $after) {
    nodes { ...RunCard } pageInfo { hasNextPage endCursor }
  }
}`,
  [RUN_CARD],
)

/**
 * Runs waiting to start before `until`, with who scheduled them and the
 * program they will run: the board's "Next up" and stand-by list the ones a
 * person scheduled (`startRun(at:)`), which no schedule's occurrences show.
 */
export const SCHEDULED_PAGE = graphql(
  `
query ScheduledRuns($first: Int!, $after: String, $until: DateTime) {
  runPage(filter: { statuses: [SCHEDULED], scheduledBefore: $until }, first: $first, after: $after) {
    nodes { ...RunCard startedBy timezone version { version program } } pageInfo { hasNextPage endCursor }
  }
}`,
  [RUN_CARD],
)
export type ScheduledRun = ResultOf<typeof SCHEDULED_PAGE>['runPage']['nodes'][number]

/** The same runs for the board's "Next up": who scheduled them, without the program. */
export const SCHEDULED_CARDS = graphql(
  `
query ScheduledCards($first: Int!, $after: String, $until: DateTime) {
  runPage(filter: { statuses: [SCHEDULED], scheduledBefore: $until }, first: $first, after: $after) {
    nodes { ...RunCard startedBy } pageInfo { hasNextPage endCursor }
  }
}`,
  [RUN_CARD],
)
export type ScheduledCard = ResultOf<typeof SCHEDULED_CARDS>['runPage']['nodes'][number]

/** The rest of the board: runs just ended, what comes next, and health. */
export const BOARD = graphql(
  `
query Board {
  ended: runPage(filter: { statuses: [COMPLETED, FAILED, CANCELLED, MISSED] }, first: 8) { nodes { ...RunCard } }
  definitions { id slug title timezone state schedule nextOccurrences(count: 3) }
  health { ...HealthFields }
}`,
  [RUN_CARD, HEALTH_FIELDS],
)
export type BoardData = ResultOf<typeof BOARD>

/**
 * A change to a run in progress (or one leaving that state): the board and
 * stand-by refetch when one arrives.
 */
export const RUN_CHANGES = graphql(`
subscription RunChanges { runChanges(filter: { statuses: [STARTING, RUNNING, PAUSED, ENDING] }) { id status } }`)

/**
 * A run moving into or out of PAUSED: the inbox reads itself again, so a
 * cue's "run paused" mark follows a pause at once (the inbox's own feed moves
 * on cue changes; a pause changes the run, not the cue).
 */
export const PAUSE_CHANGES = graphql(`
subscription PauseChanges { runChanges(filter: { statuses: [PAUSED] }) { id status } }`)

/** Where a cue's ladder stands (RunStep.cue): who it is for, rungs sent, who answered. */
const CUE_LADDER = graphql(`
fragment CueLadder on Cue {
  openedAt deadlineAt assignees exclusive escalationLevel remindersSent
  answer { outcome by via at note }
}`)
export type CueLadder = ResultOf<typeof CUE_LADDER>

const CUE_FIELDS = graphql(
  `
fragment CueFields on RunStep {
  id seq phase kind params startedAt cue { ...CueLadder }
  run { id scope status currentPhase rehearsal definition { id slug title } }
}`,
  [CUE_LADDER],
)
export type Cue = ResultOf<typeof CUE_FIELDS>

/** The inbox: every parked cue, oldest first. */
export const INBOX = graphql(`query Inbox { waitingSteps(limit: 500) { ...CueFields } }`, [CUE_FIELDS])
export type InboxData = ResultOf<typeof INBOX>
/** The cues for me: assigned to my name or one of my teams, or to nobody. */
export const INBOX_MINE = graphql(
  `query InboxMine { waitingSteps(limit: 500, mine: true) { ...CueFields } }`,
  [CUE_FIELDS],
)
/**
 * The inbox as changes: the whole inbox first (`reset`), then only the cues
 * new or changed and the ids that left. Each new cue costs the server and the
 * page one cue, not a whole inbox; inboxState.ts applies the changes.
 */
export const INBOX_CHANGES = graphql(
  `subscription InboxChanges { waitingStepChanges(limit: 500) { reset added { ...CueFields } removed } }`,
  [CUE_FIELDS],
)
export const INBOX_MINE_CHANGES = graphql(
  `subscription InboxMineChanges { waitingStepChanges(limit: 500, mine: true) { reset added { ...CueFields } removed } }`,
  [CUE_FIELDS],
)
export type InboxChangeData = ResultOf<typeof INBOX_CHANGES>

/**
 * A step as stand-by and the run page show it. The whole ladder (`cue`) is the
 * run page's: stand-by reads a page of runs with all their steps and takes
 * only each cue's deadline, so its page stays inside the query budget.
 */
const STEP_FIELDS = graphql(`
fragment StepCard on RunStep {
  id seq phase kind params status parked attempts maxAttempts wakeAt startedAt endedAt lastError
}`)
export type StepCard = ResultOf<typeof STEP_FIELDS>

/** Stand-by: the steps of every run in progress, to find each one's next cue. */
export const STANDBY = graphql(
  `
query Standby($first: Int!, $after: String) {
  runPage(filter: { statuses: [STARTING, RUNNING, PAUSED, ENDING] }, first: $first, after: $after) {
    nodes { ...RunCard steps { ...StepCard cue { deadlineAt } } } pageInfo { hasNextPage endCursor }
  }
}`,
  [RUN_CARD, STEP_FIELDS],
)
export type RunWithSteps = ResultOf<typeof STANDBY>['runPage']['nodes'][number]

export const RUN = graphql(
  `
query Run($id: ID!) {
  run(id: $id) {
    ...RunCard timezone startedBy params claimedBy updatedAt
    version { version }
    concurrencyHolder { id definition { title } scope }
    steps { ...StepCard result cue { ...CueLadder } }
    logs(limit: 200) { id at level message actor }
  }
}`,
  [RUN_CARD, STEP_FIELDS, CUE_LADDER],
)
export type RunData = ResultOf<typeof RUN>
export const RUN_STATUS = graphql(
  `subscription RunStatus($id: ID!) { runStatus(id: $id) { id status updatedAt } }`,
)

const DEFINITION_FIELDS = graphql(`
fragment DefinitionCard on EventDefinition {
  id slug title description schedule timezone state graceSeconds scopes concurrencyKey
  currentVersion { version }
}`)
export type DefinitionCard = ResultOf<typeof DEFINITION_FIELDS>

export const DEFINITIONS = graphql(
  `
query Definitions { definitions(includeArchived: true) { ...DefinitionCard nextOccurrences(count: 3) } }`,
  [DEFINITION_FIELDS],
)
export type DefinitionsData = ResultOf<typeof DEFINITIONS>

export const DEFINITION = graphql(
  `
query Definition($id: ID!) {
  definition(id: $id) {
    ...DefinitionCard
    nextOccurrences(count: 10)
    versions { id version createdAt createdBy program }
  }
  runs(definitionId: $id, limit: 20) { ...RunCard }
}`,
  [DEFINITION_FIELDS, RUN_CARD],
)
export type DefinitionData = ResultOf<typeof DEFINITION>

export const RESOLVE_CUE = graphql(`
mutation ResolveCue($stepId: ID!, $note: String) { resolveCue(stepId: $stepId, note: $note) { applied } }`)
export const SKIP_STEP = graphql(`
mutation SkipStep($stepId: ID!, $reason: String) { skipStep(stepId: $stepId, reason: $reason) { applied } }`)
export const RETRY_STEP_NOW = graphql(`
mutation RetryStepNow($stepId: ID!) { retryStepNow(stepId: $stepId) { applied step { id status attempts } } }`)

export const PAUSE_RUN = graphql(`mutation PauseRun($id: ID!) { pauseRun(id: $id) { applied } }`)
export const RESUME_RUN = graphql(`mutation ResumeRun($id: ID!) { resumeRun(id: $id) { applied } }`)
export const CANCEL_RUN = graphql(`
mutation CancelRun($id: ID!, $reason: String) { cancelRun(id: $id, reason: $reason) { applied } }`)
export const START_RUN = graphql(`
mutation StartRun($definitionId: ID!, $scope: String, $rehearsal: Boolean, $speed: Float) {
  startRun(definitionId: $definitionId, scope: $scope, rehearsal: $rehearsal, speed: $speed) { id }
}`)
export const SET_DEFINITION_STATE = graphql(`
mutation SetDefinitionState($id: ID!, $state: DefinitionState!) { setDefinitionState(id: $id, state: $state) { id state } }`)
