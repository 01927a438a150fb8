/**
 * The schema against its contract: the committed SDL is what the code prints,
 * and every type, field, argument and default of the public contract
 * (test/fixtures/spec-api.graphql, described in docs/contract.md) is present exactly
 * (extra fields and optional extra arguments are allowed: extend, never rename).
 */
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import {
  astFromValue,
  buildSchema,
  type GraphQLArgument,
  type GraphQLInputField,
  type GraphQLSchema,
  isEnumType,
  isInputObjectType,
  isNonNullType,
  isObjectType,
  isScalarType,
  OperationTypeNode,
  print,
} from 'graphql'
import { describe, expect, it } from 'vitest'
import { ROLE_EXTENSION } from '../src/api/authz.ts'
import { schema } from '../src/api/schema.ts'
import { printedSchema, SCHEMA_FILE } from '../src/api/schemaPrint.ts'

const here = dirname(fileURLToPath(import.meta.url))
const FIXTURE = join(here, 'fixtures', 'spec-api.graphql')
const specSdl = readFileSync(FIXTURE, 'utf8')

function defaultOf(x: GraphQLArgument | GraphQLInputField): string | undefined {
  if (x.defaultValue === undefined) return undefined
  const ast = astFromValue(x.defaultValue, x.type)
  return ast ? print(ast) : 'null'
}

/** Every way `built` falls short of `spec`; empty when it honours the contract. */
function contractProblems(spec: GraphQLSchema, built: GraphQLSchema): string[] {
  const problems: string[] = []
  for (const [name, specType] of Object.entries(spec.getTypeMap())) {
    if (name.startsWith('__') || ['String', 'Int', 'Float', 'Boolean', 'ID'].includes(name)) continue
    const got = built.getType(name)
    if (!got) {
      problems.push(`missing type ${name}`)
      continue
    }
    if (got.constructor !== specType.constructor) {
      problems.push(`${name} is a ${got.constructor.name}, the contract says ${specType.constructor.name}`)
      continue
    }
    if (isEnumType(specType) && isEnumType(got)) {
      const values = new Set(got.getValues().map((v) => v.name))
      for (const v of specType.getValues())
        if (!values.has(v.name)) problems.push(`${name}.${v.name} missing`)
    }
    if (isScalarType(specType)) continue
    if (
      (isObjectType(specType) && isObjectType(got)) ||
      (isInputObjectType(specType) && isInputObjectType(got))
    ) {
      const gotFields = got.getFields()
      for (const [fname, sf] of Object.entries(specType.getFields())) {
        const gf = gotFields[fname]
        const where = `${name}.${fname}`
        if (!gf) {
          problems.push(`missing field ${where}`)
          continue
        }
        if (String(gf.type) !== String(sf.type))
          problems.push(`${where} is ${gf.type}, the contract says ${sf.type}`)
        if (
          'defaultValue' in sf &&
          defaultOf(gf as GraphQLInputField) !== defaultOf(sf as GraphQLInputField)
        ) {
          problems.push(
            `${where} defaults to ${defaultOf(gf as GraphQLInputField)}, the contract says ${defaultOf(sf as GraphQLInputField)}`,
          )
        }
        if ('args' in sf && 'args' in gf) {
          for (const sa of sf.args) {
            const ga = gf.args.find((a) => a.name === sa.name)
            if (!ga) {
              problems.push(`missing argument ${where}(${sa.name})`)
              continue
            }
            if (String(ga.type) !== String(sa.type))
              problems.push(`${where}(${sa.name}) is ${ga.type}, the contract says ${sa.type}`)
            if (defaultOf(ga) !== defaultOf(sa)) {
              problems.push(
                `${where}(${sa.name}) defaults to ${defaultOf(ga)}, the contract says ${defaultOf(sa)}`,
              )
            }
          }
          for (const ga of gf.args) {
            if (
              !sf.args.some((a: GraphQLArgument) => a.name === ga.name) &&
              isNonNullType(ga.type) &&
              ga.defaultValue === undefined
            ) {
              problems.push(`${where}(${ga.name}) is an extra required argument; extensions must be optional`)
            }
          }
        }
      }
      if (isInputObjectType(got) && isInputObjectType(specType)) {
        const specFields = specType.getFields()
        for (const gf of Object.values(got.getFields())) {
          if (!specFields[gf.name] && isNonNullType(gf.type) && gf.defaultValue === undefined) {
            problems.push(`${name}.${gf.name} is an extra required input field`)
          }
        }
      }
    }
  }
  for (const op of [OperationTypeNode.QUERY, OperationTypeNode.MUTATION, OperationTypeNode.SUBSCRIPTION]) {
    const specRoot = spec.getRootType(op)
    const gotRoot = built.getRootType(op)
    if (specRoot && gotRoot?.name !== specRoot.name)
      problems.push(`the ${op} root type is not ${specRoot.name}`)
  }
  return problems
}

describe('schema', () => {
  it('the committed schema/schema.graphql is the printed schema (run npm run schema:print when this fails)', () => {
    expect(readFileSync(SCHEMA_FILE, 'utf8')).toBe(printedSchema())
  })

  it('has every type, field, argument and default of the contract, exactly', () => {
    expect(contractProblems(buildSchema(specSdl), schema)).toEqual([])
  })

  it('has the names user interfaces code against (contract v2: runPage, runChanges, waitingSteps), exactly', () => {
    const v2 = `
      scalar DateTime
      enum RunStatus { SCHEDULED STARTING RUNNING PAUSED ENDING COMPLETED CANCELLED FAILED MISSED }
      type EventRun { id: ID! }
      type RunStep { id: ID! }
      input RunFilter { definitionId: ID  statuses: [RunStatus!]  scope: String
        scheduledAfter: DateTime  scheduledBefore: DateTime  rehearsal: Boolean }
      type PageInfo { endCursor: String  hasNextPage: Boolean! }
      type RunPage { nodes: [EventRun!]!  pageInfo: PageInfo! }
      type Query { runPage(filter: RunFilter, first: Int = 50, after: String): RunPage! }
      type Subscription { runChanges(filter: RunFilter): EventRun!  waitingSteps(limit: Int = 100): [RunStep!]! }
    `
    expect(contractProblems(buildSchema(v2), schema)).toEqual([])
  })

  it('has the people-and-keys names (contract v3: ApiKey, CreatedApiKey, Viewer name and teams), exactly', () => {
    const v3 = `
      scalar DateTime
      enum Role { VIEWER OPERATOR ADMIN }
      type ApiKey { id: ID!  name: String!  role: Role!  teams: [String!]!  prefix: String!  createdAt: DateTime!
        createdBy: String!  expiresAt: DateTime  lastUsedAt: DateTime  revokedAt: DateTime }
      type CreatedApiKey { key: ApiKey!  secret: String! }
      type Viewer { role: Role!  name: String!  teams: [String!]! }
      type Query { apiKeys(includeRevoked: Boolean = false): [ApiKey!]!  viewer: Viewer! }
      type Mutation {
        createApiKey(name: String!, role: Role!, teams: [String!], expiresAt: DateTime): CreatedApiKey!
        revokeApiKey(id: ID!): ApiKey!
      }
    `
    expect(contractProblems(buildSchema(v3), schema)).toEqual([])
  })

  it('the contract check itself notices a renamed field, a changed default and a changed nullability', () => {
    const altered = specSdl
      .replace(
        'runs(definitionId: ID, status: RunStatus, limit: Int = 100)',
        'runs(definitionId: ID, status: RunStatus, limit: Int = 50)',
      )
      .replace('waitingSteps: Int! steps:', 'waitingStepCount: Int! steps:')
      .replace('run(id: ID!): EventRun', 'run(id: ID!): EventRun!')
    const problems = contractProblems(buildSchema(altered), schema)
    expect(problems).toContain('Query.runs(limit) defaults to 100, the contract says 50')
    expect(problems).toContain('missing field EventRun.waitingStepCount')
    expect(problems).toContain('Query.run is EventRun, the contract says EventRun!')
  })

  it('every root field declares the role the contract gives it', () => {
    const roles: Record<string, string> = {}
    for (const type of [schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()]) {
      for (const f of Object.values(type?.getFields() ?? {}))
        roles[`${type?.name}.${f.name}`] = String(f.extensions[ROLE_EXTENSION])
    }
    const expected: Record<string, string> = {
      'Query.runs': 'viewer',
      'Query.run': 'viewer',
      'Query.waitingSteps': 'viewer',
      'Query.viewer': 'viewer',
      'Query.definitions': 'viewer',
      'Query.definition': 'viewer',
      'Query.health': 'viewer',
      'Query.runPage': 'viewer',
      'Subscription.runStatus': 'viewer',
      'Subscription.runChanges': 'viewer',
      'Subscription.waitingSteps': 'viewer',
      'Subscription.waitingStepChanges': 'viewer',
      'Mutation.startRun': 'operator',
      'Mutation.pauseRun': 'operator',
      'Mutation.resumeRun': 'operator',
      'Mutation.cancelRun': 'operator',
      'Mutation.resolveCue': 'operator',
      'Mutation.skipStep': 'operator',
      'Mutation.retryStepNow': 'operator',
      'Mutation.backfillRuns': 'operator',
      'Mutation.createDefinition': 'admin',
      'Mutation.updateDefinition': 'admin',
      'Mutation.publishVersion': 'admin',
      'Mutation.setDefinitionState': 'admin',
      'Query.apiKeys': 'admin',
      'Mutation.createApiKey': 'admin',
      'Mutation.revokeApiKey': 'admin',
      'Query.exportDefinitions': 'viewer',
      'Mutation.applyDefinitions': 'admin',
      // The calendar and operating many shows (v3).
      'Query.calendars': 'viewer',
      'Mutation.createCalendar': 'admin',
      'Mutation.updateCalendar': 'admin',
      'Mutation.deleteCalendar': 'admin',
      'Mutation.skipOccurrence': 'operator',
      'Mutation.moveOccurrence': 'operator',
      'Mutation.bulkRuns': 'operator',
      'Mutation.retryRun': 'operator',
      'Query.notificationChannels': 'admin',
      'Query.notificationDeliveries': 'admin',
      'Mutation.createNotificationChannel': 'admin',
      'Mutation.updateNotificationChannel': 'admin',
      'Mutation.deleteNotificationChannel': 'admin',
      'Mutation.testNotificationChannel': 'admin',
      'Mutation.redeliver': 'admin',
    }
    expect(roles).toEqual(expected)
  })
})
