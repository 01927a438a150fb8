/**
 * Executing one round of a batch's steps at once, at most `limit` in flight,
 * without letting a slow few hold up the rest.
 *
 * A batch moves in lock-step rounds: its outcomes are written together, and
 * only then does the next step of any of its runs begin. One slow webhook in
 * a thousand would otherwise hold the other 999 runs (and their audiences)
 * for up to its timeout. So a round stops waiting for stragglers: once every
 * step has been started and half have settled, it waits at most as long
 * again as the first half took (never less than {@link MIN_STRAGGLER_WAIT_MS}),
 * then answers with the steps still executing as pending promises, for the
 * caller to finish one by one. A round whose steps all take about as long
 * settles whole; only the ones far slower than their peers are let go.
 */

import { type SlotLane, StepSlots } from './slots.ts'

/** How a step's execution ended: its answer, or the error it threw. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown }

/** The least a round waits for its stragglers once half of it has settled. */
export const MIN_STRAGGLER_WAIT_MS = 50

export interface RoundResult<T> {
  /** Per task, in order: how it settled, or undefined when it is still executing. */
  settled: (Settled<T> | undefined)[]
  /** The tasks still executing, by index: each settles in its own time. */
  pending: Map<number, Promise<Settled<T>>>
}

function settle<T>(task: () => Promise<T>): Promise<Settled<T>> {
  // A task that throws synchronously settles as failed like one that rejects.
  return Promise.resolve()
    .then(task)
    .then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    )
}

/**
 * Run `tasks` with at most `limit` in flight (`unlimited` tasks take no slot:
 * they finish at once) and answer as described above.
 */
export function executeRound<T>(
  tasks: readonly { run: () => Promise<T>; unlimited?: boolean }[],
  limit: number,
  opts: {
    /** Told of each task that settles before the round answers, as it settles. */
    onSettled?: (index: number, settled: Settled<T>) => void
    minWaitMs?: number
    /**
     * Places shared with other rounds, used instead of `limit` places of the
     * round's own: a task waits for one in its lane's turn (slots.ts). Either
     * way the wait for stragglers begins only once every task has one.
     */
    slots?: SlotLane
  } = {},
): Promise<RoundResult<T>> {
  const minWaitMs = opts.minWaitMs ?? MIN_STRAGGLER_WAIT_MS
  const settled: (Settled<T> | undefined)[] = new Array(tasks.length).fill(undefined)
  const promises = new Map<number, Promise<Settled<T>>>()
  if (tasks.length === 0) return Promise.resolve({ settled, pending: promises })
  const t0 = Date.now()
  // The round's own places unless it shares some: one way of waiting for either.
  const places = opts.slots ?? new StepSlots(limit).lane(0)
  let done = 0
  let halfAt: number | null = null
  /** Tasks still waiting for a place. */
  let awaitingPlaces = 0
  let cutoff: NodeJS.Timeout | undefined

  return new Promise<RoundResult<T>>((resolve) => {
    let answered = false
    const answer = () => {
      if (answered) return
      answered = true
      clearTimeout(cutoff)
      const pending = new Map<number, Promise<Settled<T>>>()
      for (const [i, p] of promises) if (settled[i] === undefined) pending.set(i, p)
      resolve({ settled, pending })
    }
    const armCutoff = () => {
      if (cutoff !== undefined || halfAt === null || awaitingPlaces > 0) return
      cutoff = setTimeout(answer, Math.max(minWaitMs, halfAt))
    }
    const start = (i: number, counted: boolean) => {
      const run = (tasks[i] as { run: () => Promise<T> }).run
      if (counted) awaitingPlaces++
      const p = counted
        ? places.acquire().then(() => {
            awaitingPlaces--
            return settle(run).finally(() => places.release())
          })
        : settle(run)
      promises.set(i, p)
      void p.then((s) => {
        if (answered) return
        settled[i] = s
        opts.onSettled?.(i, s)
        done++
        if (done === tasks.length) return answer()
        if (halfAt === null && done * 2 >= tasks.length) halfAt = Date.now() - t0
        armCutoff()
      })
    }
    for (const [i, task] of tasks.entries()) start(i, !task.unlimited)
  })
}
