/** `EventVersion`: an immutable program. */
import { EventVersionRef } from './refs.ts'

EventVersionRef.implement({
  description: 'A published program. Immutable: runs pin the version current when they were made.',
  fields: (t) => ({
    id: t.exposeID('id'),
    version: t.exposeInt('version', { description: '1, 2, … per definition.' }),
    program: t.expose('program', { type: 'JSON' }),
    createdBy: t.exposeString('createdBy', { nullable: true }),
    createdAt: t.expose('createdAt', { type: 'DateTime' }),
  }),
})
