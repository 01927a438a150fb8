/**
 * The inbox a page holds, kept from `waitingStepChanges` events: a `reset`
 * replaces it whole; a change puts in (or replaces, by id) the cues `added`
 * and drops those `removed`. The result is in the server's order, oldest
 * first: a waiting cue's place is the instant it began, then its id.
 */
import type { Cue, InboxChangeData, InboxData } from './operations.ts'

type Change = InboxChangeData['waitingStepChanges']

/** The server's order of waiting cues: began earlier first, then the lower id. */
export function byWaitingOrder(a: Cue, b: Cue): number {
  const began = Date.parse(a.startedAt ?? '') - Date.parse(b.startedAt ?? '')
  if (began !== 0 && Number.isFinite(began)) return began
  // Ids are decimal integers past 2^53 at worst: compared as text, the shorter is the smaller.
  return a.id.length - b.id.length || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
}

/**
 * `held` after `change`, or null when the change cannot be placed: a change
 * other than a reset with nothing held is relative to an inbox this page
 * never had, so the caller must ask for the whole inbox again.
 */
export function applyInboxChange(held: InboxData | undefined, change: Change): InboxData | null {
  if (change.reset) return { waitingSteps: [...change.added].sort(byWaitingOrder) }
  if (!held) return null
  const replaced = new Set([...change.removed, ...change.added.map((c) => c.id)])
  const kept = held.waitingSteps.filter((c) => !replaced.has(c.id))
  return { waitingSteps: [...kept, ...change.added].sort(byWaitingOrder) }
}

/** The reducer `useLive` takes for a `waitingStepChanges` subscription. */
export function reduceInbox(held: InboxData | undefined, event: unknown): InboxData | null {
  return applyInboxChange(held, (event as InboxChangeData).waitingStepChanges)
}
