/**
 * The GraphQL schema, composed from above: the types `schema/` declares and
 * the root fields `resolvers/` registers on the same builder, built once, with
 * each root field wrapped in its role check (authz.ts). Neither layer imports
 * the other's index; this module is where the two meet, and the server hands
 * what it builds to yoga.
 */
import { builder } from '../../schema/index.ts'
import '../../resolvers/index.ts'
import { guardRootFields } from './authz.ts'

export const schema = guardRootFields(builder.toSchema())
