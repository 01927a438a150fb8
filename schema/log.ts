/** `RunLog`: one line of a run's log. */
import { seesResponseBodies, withheldResponseQuote } from '../src/api/redact.ts'
import { RunLogRef } from './refs.ts'

RunLogRef.implement({
  description: 'What happened to a run and who did it.',
  fields: (t) => ({
    id: t.exposeID('id'),
    at: t.expose('at', { type: 'DateTime' }),
    level: t.exposeString('level', { description: 'debug, info, warn or error.' }),
    message: t.string({
      description:
        'A quoted webhook response body reads as withheld unless the caller is an operator or admin.',
      resolve: (line, _args, ctx) =>
        seesResponseBodies(ctx) ? line.message : (withheldResponseQuote(line.message) ?? ''),
    }),
    actor: t.exposeString('actor', {
      nullable: true,
      description: 'A runner instance, "schedule", or a token name such as "operator#1a2b3c4d".',
    }),
    stepId: t.exposeID('stepId', { nullable: true }),
    data: t.expose('data', { type: 'JSON', nullable: true }),
  }),
})
