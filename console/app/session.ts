/** Who is signed in, what they may do, and a place to say what just happened. */
import { createContext } from 'preact'
import { useContext } from 'preact/hooks'
import type { Role } from './operations.ts'

const RANK: Record<Role, number> = { VIEWER: 0, OPERATOR: 1, ADMIN: 2 }

export interface Session {
  token: string
  role: Role
  actor: string
  /** The person's name (a token from before names existed may only have an actor). */
  name?: string
  teams?: string[]
  /** Announce the outcome of an action (a polite live region). */
  notify(message: string, kind?: 'ok' | 'error'): void
  /**
   * Hold an action a person cannot take back on the server (skip, cancel) for
   * a few seconds with an Undo in a toast, then send it (undo.tsx).
   */
  later(label: string, action: () => Promise<unknown>): void
}

export const SessionContext = createContext<Session | null>(null)

export function useSession(): Session {
  const s = useContext(SessionContext)
  if (!s) throw new Error('useSession outside a signed-in console')
  return s
}

/** True when the signed-in role includes `needed` (admin ⊇ operator ⊇ viewer). */
export function can(session: Session, needed: Role): boolean {
  return RANK[session.role] >= RANK[needed]
}
