/**
 * `waitingStepChanges`: the cue inbox as changes rather than whole inboxes.
 *
 * `waitingSteps` sends a subscriber its whole inbox again whenever it
 * changes (the contract says so), so each new cue costs every subscriber
 * the execution, serialisation and parsing of up to 500 cues. Under a show
 * that is most of what an inbox poll costs, and the polls that bring new
 * cues come one after another. Here each subscriber gets its inbox once
 * (`reset`), then only what changed since the inbox it was last sent: the
 * cues new to it or changed since (`added`, to put in or replace by id) and
 * the ids of those that left it (`removed`: answered, skipped, timed out, or
 * pushed past `limit` by older ones).
 *
 * The inboxes come from the same feed as `waitingSteps` (inboxFeed.ts), so
 * a slow consumer still skips to the newest inbox; the change is worked out
 * against what this subscriber was sent, so nothing between is lost.
 */
import type { StepRow } from '../../sql/eventSteps/index.ts'
import type { Inbox } from './inboxFeed.ts'
import type { Loaders } from './loaders.ts'

/** One event of `waitingStepChanges`. */
export interface InboxChange {
  /** True on the first event: `added` is then the whole inbox, and nothing was sent before. */
  reset: boolean
  /** Cues new to the inbox or changed since the last event, oldest first. */
  added: StepRow[]
  /** Ids of the cues that left the inbox since the last event. */
  removed: string[]
  /** The poll's loaders, holding the cues' runs (see inboxFeed.ts). */
  loaders: Loaders
}

/**
 * The changes between consecutive inboxes of `inboxes`, as they are pulled.
 * A hand-written iterator, not an async generator: a generator waiting for
 * the next inbox cannot be ended until one comes, and an unsubscribed
 * client's feed listener would stay until the inbox next changed.
 */
export function inboxChanges(inboxes: AsyncIterableIterator<Inbox>): AsyncIterableIterator<InboxChange> {
  /** What this subscriber was last sent: each cue's id and its last change. */
  let sent: Map<number, number> | null = null
  const changeFrom = (inbox: Inbox): InboxChange | null => {
    const now = new Map(inbox.steps.map((s) => [s.id, s.updatedAt.getTime()]))
    const before = sent
    sent = now
    if (before === null) return { reset: true, added: inbox.steps, removed: [], loaders: inbox.loaders }
    const added = inbox.steps.filter((s) => before.get(s.id) !== s.updatedAt.getTime())
    const removed: string[] = []
    for (const id of before.keys()) if (!now.has(id)) removed.push(String(id))
    if (added.length === 0 && removed.length === 0) return null
    return { reset: false, added, removed, loaders: inbox.loaders }
  }
  const iterator: AsyncIterableIterator<InboxChange> = {
    async next() {
      for (;;) {
        const r = await inboxes.next()
        if (r.done) return { done: true, value: undefined }
        const change = changeFrom(r.value)
        if (change) return { done: false, value: change }
      }
    },
    async return() {
      await inboxes.return?.()
      return { done: true, value: undefined }
    },
    async throw(err: unknown) {
      await inboxes.return?.()
      throw err
    },
    [Symbol.asyncIterator]() {
      return iterator
    },
  }
  return iterator
}
