/** `EventVersion`: an immutable program. */
import { redactProgram, seesLiterals } from '../src/api/redact.ts'
import { EventVersionRef } from './refs.ts'

EventVersionRef.implement({
  description: 'A published program. Immutable: runs pin the version current when they were made.',
  fields: (t) => ({
    id: t.exposeID('id'),
    version: t.exposeInt('version', { description: '1, 2, … per definition.' }),
    program: t.field({
      type: 'JSON',
      description:
        'The program. Literal webhook header values read as "[redacted]" unless the caller is an admin.',
      resolve: (v, _args, ctx) => (seesLiterals(ctx) ? v.program : redactProgram(v.program)),
    }),
    createdBy: t.exposeString('createdBy', { nullable: true }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
})
