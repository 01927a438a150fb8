/**
 * A short window to take back an action that cannot be undone on the server
 * (skip a step, cancel a run): the console holds the action for
 * {@link UNDO_MS}, showing it in a toast with an Undo button, and sends it
 * only when the window closes. Undo (the button, which takes the focus, or
 * Escape) drops it and nothing is sent. Leaving the page inside the window
 * sends it at once (best effort): what a person asked for is not silently lost.
 */
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks'

/** How long an action waits for an Undo before it is sent. */
export const UNDO_MS = 5000

interface Pending {
  n: number
  /** What will happen, as a sentence fragment: "Skipping step 2". */
  label: string
  sendAt: number
  action: () => Promise<unknown>
}

export interface UndoQueue {
  pending: readonly Pending[]
  /** Hold `action` for {@link UNDO_MS}, then send it unless undone. */
  later(label: string, action: () => Promise<unknown>): void
  undo(n: number): void
}

export function useUndoQueue(onUndone: (label: string) => void): UndoQueue {
  const [pending, setPending] = useState<Pending[]>([])
  const timers = useRef(new Map<number, { timer: ReturnType<typeof setTimeout>; item: Pending }>())
  const seq = useRef(0)

  const send = useCallback((n: number) => {
    const held = timers.current.get(n)
    if (!held) return
    clearTimeout(held.timer)
    timers.current.delete(n)
    setPending((list) => list.filter((p) => p.n !== n))
    // The action reports its own outcome (a toast); a rejection is not left unhandled.
    held.item.action().catch(() => {})
  }, [])

  const later = useCallback(
    (label: string, action: () => Promise<unknown>) => {
      const n = ++seq.current
      const item = { n, label, sendAt: Date.now() + UNDO_MS, action }
      timers.current.set(n, { timer: setTimeout(() => send(n), UNDO_MS), item })
      setPending((list) => [...list, item])
    },
    [send],
  )

  const undo = useCallback(
    (n: number) => {
      const held = timers.current.get(n)
      if (!held) return
      clearTimeout(held.timer)
      timers.current.delete(n)
      setPending((list) => list.filter((p) => p.n !== n))
      onUndone(held.item.label)
    },
    [onUndone],
  )

  useEffect(() => {
    const flush = () => {
      for (const n of [...timers.current.keys()]) send(n)
    }
    window.addEventListener('pagehide', flush)
    return () => window.removeEventListener('pagehide', flush)
  }, [send])

  return { pending, later, undo }
}

/** The held actions, newest last, each with its countdown and Undo. */
export function UndoToasts({ queue }: { queue: UndoQueue }) {
  // Ticks re-render the countdowns; each render reads the clock itself.
  const [, setTick] = useState(0)
  const now = Date.now()
  const { pending, undo } = queue
  useEffect(() => {
    if (pending.length === 0) return
    const t = setInterval(() => setTick((n) => n + 1), 250)
    return () => clearInterval(t)
  }, [pending.length])
  const newest = pending.at(-1)
  // Layout effects, attached as the toast is put in the page: a plain effect
  // runs a frame later, and an Escape pressed as soon as the toast shows (a
  // quick hand, a loaded machine) went unheard and the action was sent.
  useLayoutEffect(() => {
    if (!newest) return
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') {
        e.preventDefault()
        undo(newest.n)
      }
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [newest, undo])
  // The newest action's Undo takes the focus once, when it appears (the form that asked has closed).
  const newestN = newest?.n
  useLayoutEffect(() => {
    if (newestN !== undefined)
      document.querySelector<HTMLButtonElement>(`button[data-undo="${newestN}"]`)?.focus()
  }, [newestN])
  if (pending.length === 0) return null
  return (
    <section class="undo-toasts" aria-label="Actions waiting to be sent">
      {pending.map((p) => (
        <div class="toast undo" key={p.n} data-testid="undo-toast">
          <span role="status">{p.label}</span>{' '}
          <span class="muted" aria-hidden="true">
            in {Math.max(0, Math.ceil((p.sendAt - now) / 1000))} s
          </span>{' '}
          <button type="button" data-undo={p.n} onClick={() => undo(p.n)} aria-keyshortcuts="Escape">
            Undo
          </button>
        </div>
      ))}
    </section>
  )
}
