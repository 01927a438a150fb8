/**
 * The schema: the builder, every type, every root field, built once, with each
 * root field wrapped in its role check (src/api/authz.ts).
 */
import { guardRootFields } from '../src/api/authz.ts'
import { builder } from './builder.ts'
import './scalars.ts'
import './enums.ts'
import './run.ts'
import './step.ts'
import './log.ts'
import './definition.ts'
import './version.ts'
import './health.ts'
import './results.ts'
import './inputs.ts'
import './runPage.ts'
import './apply.ts'
import './calendar.ts'
import './bulk.ts'
import '../resolvers/index.ts'

export const schema = guardRootFields(builder.toSchema())
