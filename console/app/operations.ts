/**
 * Every GraphQL operation the console sends, each beside the TypeScript type
 * of its answer (written by hand against schema/schema.graphql).
 */

export type Role = 'VIEWER' | 'OPERATOR' | 'ADMIN'
export type RunStatus =
  | 'SCHEDULED'
  | 'STARTING'
  | 'RUNNING'
  | 'PAUSED'
  | 'ENDING'
  | 'COMPLETED'
  | 'CANCELLED'
  | 'FAILED'
  | 'MISSED'
export type RunHealth = 'OK' | 'DEGRADED'
export type StepStatus = 'PENDING' | 'RUNNING' | 'COMPLETED' | 'FAILED' | 'SKIPPED' | 'CANCELLED'
export type DefinitionState = 'ACTIVE' | 'PAUSED' | 'ARCHIVED'
/** ISO-8601 in UTC. */
export type DateTime = string
export type Json = unknown

export const VIEWER = /* GraphQL */ `query Viewer { viewer { role actor } }`
export interface ViewerData {
  viewer: { role: Role; actor: string }
}

const RUN_CARD = /* GraphQL */ `
fragment RunCard on EventRun {
  id scope status health currentPhase waitingSteps scheduledFor startedAt endedAt rehearsal lastError
  definition { id slug title }
}`
export interface RunCard {
  id: string
  scope: string
  status: RunStatus
  health: RunHealth
  currentPhase: string | null
  waitingSteps: number
  scheduledFor: DateTime
  startedAt: DateTime | null
  endedAt: DateTime | null
  rehearsal: boolean
  lastError: string | null
  definition: { id: string; slug: string; title: string }
}

const HEALTH_FIELDS = `health { ok database waitingSteps oldestWaitingStepAt degradedRuns
  runners { id host tickLagMs lastTickAt } }`
export interface HealthData {
  ok: boolean
  database: boolean
  waitingSteps: number
  oldestWaitingStepAt: DateTime | null
  degradedRuns: number
  runners: { id: string; host: string; tickLagMs: number; lastTickAt: DateTime }[]
}

/** Runs per request: the query budget weighs `first` times what each run selects (a run with its steps weighs up to 1,000 steps, the program limit). */
export const IN_PROGRESS_PAGE_SIZE = 100
export const STANDBY_PAGE_SIZE = 10

/** A page of the runs in progress (the server's query budget weighs `first`, so long lists come in pages). */
export const IN_PROGRESS_PAGE = /* GraphQL */ `
query InProgress($first: Int!, $after: String) {
  runPage(filter: { statuses: [STARTING, RUNNING, PAUSED, ENDING] }, first: $first, after: $after) {
    nodes { ...RunCard } pageInfo { hasNextPage endCursor }
  }
}
${RUN_CARD}`
export interface RunPageData<T> {
  runPage: { nodes: T[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } }
}

/** The rest of the board: runs just ended, what comes next, and health. */
export const BOARD = /* GraphQL */ `
query Board {
  ended: runPage(filter: { statuses: [COMPLETED, FAILED, CANCELLED, MISSED] }, first: 8) { nodes { ...RunCard } }
  definitions { id slug title timezone state schedule nextOccurrences(count: 3) }
  ${HEALTH_FIELDS}
}
${RUN_CARD}`
export interface BoardData {
  ended: { nodes: RunCard[] }
  definitions: {
    id: string
    slug: string
    title: string
    timezone: string
    state: DefinitionState
    schedule: string | null
    nextOccurrences: DateTime[]
  }[]
  health: HealthData
}

/**
 * A change to a run in progress (or one leaving that state): the board and
 * stand-by refetch when one arrives.
 */
export const RUN_CHANGES = /* GraphQL */ `
subscription RunChanges { runChanges(filter: { statuses: [STARTING, RUNNING, PAUSED, ENDING] }) { id status } }`

const CUE_FIELDS = `id seq phase kind params startedAt
  run { id scope status currentPhase rehearsal definition { id slug title } }`
export interface Cue {
  id: string
  seq: number
  phase: string
  kind: string
  params: Json
  startedAt: DateTime | null
  run: {
    id: string
    scope: string
    status: RunStatus
    currentPhase: string | null
    rehearsal: boolean
    definition: { id: string; slug: string; title: string }
  }
}

/** The inbox: every parked cue, oldest first. */
export const INBOX = /* GraphQL */ `query Inbox { waitingSteps(limit: 500) { ${CUE_FIELDS} } }`
export const INBOX_LIVE = /* GraphQL */ `subscription InboxLive { waitingSteps(limit: 500) { ${CUE_FIELDS} } }`
export interface InboxData {
  waitingSteps: Cue[]
}

const STEP_FIELDS = `id seq phase kind params status parked attempts maxAttempts wakeAt startedAt endedAt lastError`
export interface StepCard {
  id: string
  seq: number
  phase: string
  kind: string
  params: Json
  status: StepStatus
  parked: boolean
  attempts: number
  maxAttempts: number
  wakeAt: DateTime | null
  startedAt: DateTime | null
  endedAt: DateTime | null
  lastError: string | null
}

/** Stand-by: the steps of every run in progress, to find each one's next cue. */
export const STANDBY = /* GraphQL */ `
query Standby($first: Int!, $after: String) {
  runPage(filter: { statuses: [STARTING, RUNNING, PAUSED, ENDING] }, first: $first, after: $after) {
    nodes { ...RunCard steps { ${STEP_FIELDS} } } pageInfo { hasNextPage endCursor }
  }
}
${RUN_CARD}`
export type RunWithSteps = RunCard & { steps: StepCard[] }

export const RUN = /* GraphQL */ `
query Run($id: ID!) {
  run(id: $id) {
    ...RunCard timezone startedBy params claimedBy updatedAt
    version { version }
    concurrencyHolder { id definition { title } scope }
    steps { ${STEP_FIELDS} result }
    logs(limit: 200) { id at level message actor }
  }
}
${RUN_CARD}`
export interface RunData {
  run:
    | (RunCard & {
        timezone: string
        startedBy: string | null
        params: Json
        claimedBy: string | null
        updatedAt: DateTime
        version: { version: number }
        concurrencyHolder: { id: string; scope: string; definition: { title: string } } | null
        steps: (StepCard & { result: Json })[]
        logs: { id: string; at: DateTime; level: string; message: string; actor: string | null }[]
      })
    | null
}
export const RUN_STATUS = /* GraphQL */ `subscription RunStatus($id: ID!) { runStatus(id: $id) { id status updatedAt } }`

const DEFINITION_FIELDS = `id slug title description schedule timezone state graceSeconds scopes concurrencyKey
  currentVersion { version }`
export interface DefinitionCard {
  id: string
  slug: string
  title: string
  description: string | null
  schedule: string | null
  timezone: string
  state: DefinitionState
  graceSeconds: number
  scopes: string[]
  concurrencyKey: string | null
  currentVersion: { version: number } | null
}

export const DEFINITIONS = /* GraphQL */ `
query Definitions { definitions(includeArchived: true) { ${DEFINITION_FIELDS} nextOccurrences(count: 3) } }`
export interface DefinitionsData {
  definitions: (DefinitionCard & { nextOccurrences: DateTime[] })[]
}

export const DEFINITION = /* GraphQL */ `
query Definition($id: ID!) {
  definition(id: $id) {
    ${DEFINITION_FIELDS}
    nextOccurrences(count: 10)
    versions { id version createdAt createdBy program }
  }
  runs(definitionId: $id, limit: 20) { ...RunCard }
}
${RUN_CARD}`
export interface DefinitionData {
  definition:
    | (DefinitionCard & {
        nextOccurrences: DateTime[]
        versions: {
          id: string
          version: number
          createdAt: DateTime
          createdBy: string | null
          program: Json
        }[]
      })
    | null
  runs: RunCard[]
}

export const RESOLVE_CUE = /* GraphQL */ `
mutation ResolveCue($stepId: ID!, $note: String) { resolveCue(stepId: $stepId, note: $note) { applied } }`
export const SKIP_STEP = /* GraphQL */ `
mutation SkipStep($stepId: ID!, $reason: String) { skipStep(stepId: $stepId, reason: $reason) { applied } }`
export interface StepResultData {
  [field: string]: { applied: boolean }
}

export const PAUSE_RUN = /* GraphQL */ `mutation PauseRun($id: ID!) { pauseRun(id: $id) { applied } }`
export const RESUME_RUN = /* GraphQL */ `mutation ResumeRun($id: ID!) { resumeRun(id: $id) { applied } }`
export const CANCEL_RUN = /* GraphQL */ `
mutation CancelRun($id: ID!, $reason: String) { cancelRun(id: $id, reason: $reason) { applied } }`
export const START_RUN = /* GraphQL */ `
mutation StartRun($definitionId: ID!, $scope: String, $rehearsal: Boolean, $speed: Float) {
  startRun(definitionId: $definitionId, scope: $scope, rehearsal: $rehearsal, speed: $speed) { id }
}`
export const SET_DEFINITION_STATE = /* GraphQL */ `
mutation SetDefinitionState($id: ID!, $state: DefinitionState!) { setDefinitionState(id: $id, state: $state) { id state } }`
