/**
 * The person behind a request, as cues see it: a name, the teams they are in,
 * and whether they are an admin. The one place cue code reads them off the
 * principal (API keys, named bootstrap tokens and OIDC claims all arrive
 * there; see docs/identity.md).
 */
import type { Principal } from '../auth.ts'

export interface Person {
  name: string
  teams: string[]
  admin: boolean
}

export function personOf(principal: Pick<Principal, 'role' | 'name' | 'teams' | 'actor'>): Person {
  const name = principal.name !== '' ? principal.name : principal.actor
  return { name, teams: [...principal.teams], admin: principal.role === 'admin' }
}

/** What a cue's assignees are matched against: the name and each `team:NAME`. */
export function identitiesOf(person: Person): string[] {
  return [person.name, ...person.teams.map((t) => `team:${t}`)]
}
