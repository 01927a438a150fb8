/**
 * Every type of the schema, registered on the builder by importing this. The
 * root fields (resolvers/) register on the same builder; src/api/schema.ts
 * composes the two and builds the schema.
 */
import { builder } from './builder.ts'
import './scalars.ts'
import './enums.ts'
import './run.ts'
import './step.ts'
import './cue.ts'
import './notifications.ts'
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

export { builder }
