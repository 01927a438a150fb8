/**
 * The documents of authoring in the console: a new show, a program checked
 * by the server before it is published (applyDefinitions as a dry run, which
 * answers every problem with its path), a new version, a run at a time with
 * params. Typed from the schema like those in operations.ts.
 */
import { graphql, type ResultOf } from '../../src/client/graphql.ts'

export const CREATE_DEFINITION = graphql(`
mutation CreateDefinition($input: CreateDefinitionInput!) { createDefinition(input: $input) { id slug } }`)

export const PUBLISH_VERSION = graphql(`
mutation PublishVersion($definitionId: ID!, $program: JSON!) {
  publishVersion(definitionId: $definitionId, program: $program) { version }
}`)

/** Checks a manifest as publishing would, writing nothing (every problem with its path). */
export const CHECK_MANIFESTS = graphql(`
mutation CheckManifests($manifests: JSON!) {
  applyDefinitions(manifests: $manifests, dryRun: true) { applied }
}`)

export const CALENDAR_NAMES = graphql(`query CalendarNames { calendars { name } }`)
export type CalendarNamesData = ResultOf<typeof CALENDAR_NAMES>

export const START_RUN_AT = graphql(`
mutation StartRunAt($definitionId: ID!, $scope: String, $rehearsal: Boolean, $speed: Float, $at: DateTime, $params: JSON) {
  startRun(definitionId: $definitionId, scope: $scope, rehearsal: $rehearsal, speed: $speed, at: $at, params: $params) { id status }
}`)
