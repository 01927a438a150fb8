/**
 * The person behind a request, as cues see it: a name, the teams they are in,
 * and whether they are an admin. The one place that reads them off the
 * principal, so names and teams from API keys or an identity provider plug in
 * here when the principal carries them; until then the name is the token's
 * actor string and nobody is in a team.
 */
import type { Principal } from '../auth.ts'

export interface Person {
  name: string
  teams: string[]
  admin: boolean
}

export function personOf(principal: Principal): Person {
  const extra = principal as Principal & { name?: unknown; teams?: unknown }
  const name = typeof extra.name === 'string' && extra.name !== '' ? extra.name : principal.actor
  const teams = Array.isArray(extra.teams)
    ? extra.teams.filter((t): t is string => typeof t === 'string')
    : []
  return { name, teams, admin: principal.role === 'admin' }
}

/** What a cue's assignees are matched against: the name and each `team:NAME`. */
export function identitiesOf(person: Person): string[] {
  return [person.name, ...person.teams.map((t) => `team:${t}`)]
}
