/**
 * The cue inbox: every parked cue, oldest first, answerable here. Live in every
 * open console: the server sends the inbox once, then each cue that parks,
 * changes or leaves (or, with the WebSocket blocked, the page polls).
 */
import { useEffect, useRef, useState } from 'preact/hooks'
import { ApiError, gql, subscribe } from '../api.ts'
import { useAlertToggle } from '../cueAlerts.tsx'
import { duration, promptOf, scopeLabel } from '../format.ts'
import { reduceInbox } from '../inboxState.ts'
import { Ladder } from '../ladder.tsx'
import { type Live, useLive, useNow } from '../live.ts'
import {
  type Cue,
  INBOX,
  INBOX_CHANGES,
  INBOX_MINE,
  INBOX_MINE_CHANGES,
  type InboxData,
  PAUSE_CHANGES,
  RESOLVE_CUE,
  SKIP_STEP,
} from '../operations.ts'
import { can, useSession } from '../session.ts'
import { ErrorNote, Loading, ZoneNote } from '../ui.tsx'

/** The inbox query, live; shared by the page and the header's count. */
export function useInbox() {
  const { token } = useSession()
  return useLive<InboxData>(token, INBOX, { subscription: { query: INBOX_CHANGES, reduce: reduceInbox } })
}

/** Focus the oldest cue's answer box (the `a` shortcut lands here). */
const FOCUS_OLDEST_EVENT = 'showrunner:focus-oldest-cue'
/**
 * How long a focus request waits for the inbox to render its oldest cue: a
 * slow device renders it seconds after the key press.
 */
const FOCUS_REQUEST_MS = 10_000
let focusRequestedAt = 0

/** The person moved on (another key, a click): the request is withdrawn. */
function withdrawFocusRequest() {
  focusRequestedAt = 0
  removeEventListener('keydown', withdrawFocusRequest, true)
  removeEventListener('pointerdown', withdrawFocusRequest, true)
}

/**
 * Ask the oldest cue's answer box to take the focus: at once if it is on the
 * page, otherwise as soon as it renders (the inbox may still be mounting after
 * the navigation that came with the request, later on a slow device), unless
 * the person presses another key or clicks first.
 */
export function focusOldestCue() {
  withdrawFocusRequest()
  focusRequestedAt = Date.now()
  dispatchEvent(new Event(FOCUS_OLDEST_EVENT))
  if (focusRequestedAt === 0) return
  // After the key press that asked has been handled, not during it.
  setTimeout(() => {
    if (focusRequestedAt === 0) return
    addEventListener('keydown', withdrawFocusRequest, true)
    addEventListener('pointerdown', withdrawFocusRequest, true)
  }, 0)
}

function CueCard({
  cue,
  now,
  oldest,
  onDone,
}: {
  cue: Cue
  now: number
  oldest: boolean
  onDone: () => void
}) {
  const session = useSession()
  const [text, setText] = useState('')
  const [busy, setBusy] = useState(false)
  const input = useRef<HTMLInputElement>(null)
  const waited = cue.startedAt ? now - Date.parse(cue.startedAt) : 0
  const operator = can(session, 'OPERATOR')

  useEffect(() => {
    if (!oldest) return
    const focus = () => {
      if (!input.current) return
      input.current.focus()
      withdrawFocusRequest()
    }
    if (Date.now() - focusRequestedAt < FOCUS_REQUEST_MS) focus()
    addEventListener(FOCUS_OLDEST_EVENT, focus)
    return () => removeEventListener(FOCUS_OLDEST_EVENT, focus)
  }, [oldest])

  async function act(kind: 'resolve' | 'skip') {
    setBusy(true)
    try {
      const note = text.trim() || null
      const data =
        kind === 'resolve'
          ? await gql(session.token, RESOLVE_CUE, { stepId: cue.id, note })
          : await gql(session.token, SKIP_STEP, { stepId: cue.id, reason: note })
      const applied = Object.values(data)[0]?.applied
      session.notify(
        applied
          ? `${kind === 'resolve' ? 'Resolved' : 'Skipped'}: ${promptOf(cue.params)}`
          : 'Someone else answered that cue first.',
        applied ? 'ok' : 'error',
      )
      onDone()
    } catch (err) {
      session.notify(err instanceof ApiError ? err.message : String(err), 'error')
    } finally {
      setBusy(false)
    }
  }

  const headingId = `cue-${cue.id}`
  return (
    <li class={`cue${oldest ? ' oldest' : ''}`} aria-labelledby={headingId} data-cue-id={cue.id}>
      <div class="cue-head">
        <h3 id={headingId} class="cue-prompt">
          {promptOf(cue.params)}
        </h3>
        <span class={`waited${waited > 5 * 60_000 ? ' long' : ''}`}>waiting {duration(waited)}</span>
      </div>
      <p class="muted">
        <a href={`#/runs/${cue.run.id}`}>{cue.run.definition.title}</a> · {scopeLabel(cue.run.scope)} · phase{' '}
        {cue.phase}
        {cue.run.rehearsal && ' · rehearsal'}
      </p>
      {cue.run.status === 'PAUSED' && (
        <p class="paused-note" data-testid="cue-run-paused">
          <span class="badge s-paused">run paused</span>{' '}
          <span class="muted small">
            Its time is held. You can still answer; the run goes on once it is resumed.
          </span>
        </p>
      )}
      <Ladder cue={cue.cue} />
      {operator && (
        <form
          class="cue-form"
          onSubmit={(e) => {
            e.preventDefault()
            void act('resolve')
          }}
        >
          <label class="grow">
            <span class="visually-hidden">Note or reason for “{promptOf(cue.params)}”</span>
            <input
              ref={input}
              type="text"
              value={text}
              maxLength={1000}
              placeholder={oldest && !TOUCH ? 'Note or reason (press a to jump here)' : 'Note or reason'}
              onInput={(e) => setText((e.target as HTMLInputElement).value)}
              disabled={busy}
            />
          </label>
          {/* Skip first: from the field, one Tab reaches it (Enter in the field resolves). */}
          <button
            type="button"
            disabled={busy}
            onClick={() => {
              // Skipping a cue needs a reason: the field is where it is written.
              if (text.trim() === '') {
                session.notify('Write why in the field first, then Skip.', 'error')
                input.current?.focus()
                return
              }
              // Held for an Undo (a skip cannot be taken back on the server).
              session.later(`Skipping “${promptOf(cue.params)}”`, () => act('skip'))
            }}
          >
            Skip
          </button>
          <button type="submit" class="primary" disabled={busy}>
            Resolve
          </button>
        </form>
      )}
    </li>
  )
}

/** The inbox of cues for me, live: its own subscription while "Mine" is ticked. */
function MineInbox() {
  const { token } = useSession()
  const mine = useLive<InboxData>(token, INBOX_MINE, {
    subscription: { query: INBOX_MINE_CHANGES, reduce: reduceInbox },
  })
  return <CueList inbox={mine} />
}

/** A touch screen without a keyboard to speak of: keyboard hints are left out. */
const TOUCH = typeof matchMedia === 'function' && matchMedia('(pointer: coarse)').matches

export function Inbox({ inbox }: { inbox: Live<InboxData> }) {
  const session = useSession()
  const [mine, setMine] = useState(false)
  const [alerts, toggleAlerts] = useAlertToggle()
  return (
    <>
      <h1>Cue inbox</h1>
      <ZoneNote />
      <p class="muted small">
        {inbox.live ? 'Live.' : 'Refreshing every few moments.'}{' '}
        {can(session, 'OPERATOR') ? (
          <span class="kbd-hint">
            Press a to answer the oldest cue: Enter resolves; Tab, then Enter, skips (write the reason first).
          </span>
        ) : (
          'Your token may watch cues, not answer them.'
        )}
      </p>
      {/* Filters and alerts for people who answer cues; a viewer's inbox is the whole inbox. */}
      {can(session, 'OPERATOR') && (
        <div class="inbox-tools">
          <label>
            <input
              type="checkbox"
              checked={mine}
              data-testid="inbox-mine"
              onChange={(e) => setMine((e.target as HTMLInputElement).checked)}
            />{' '}
            Mine only (assigned to me, my teams, or nobody)
          </label>
          <button
            type="button"
            aria-pressed={alerts}
            data-testid="cue-alerts"
            onClick={() => void toggleAlerts()}
          >
            {alerts ? 'Alerts on for my new cues' : 'Alert me of my new cues'}
          </button>
        </div>
      )}
      {mine ? <MineInbox /> : <CueList inbox={inbox} />}
    </>
  )
}

function CueList({ inbox }: { inbox: Live<InboxData> }) {
  const now = useNow()
  const { token } = useSession()
  // Cues answered here leave the list at once; the server's change (or the next poll) confirms it.
  const [answered, setAnswered] = useState<ReadonlySet<string>>(new Set())
  const held = inbox.data?.waitingSteps
  useEffect(() => {
    if (!held || answered.size === 0) return
    const still = new Set(held.map((c) => c.id))
    if ([...answered].some((id) => !still.has(id)))
      setAnswered(new Set([...answered].filter((id) => still.has(id))))
  }, [held, answered])
  const cues = held?.filter((c) => !answered.has(c.id))
  // A pause or resume of a run with a cue here: read the inbox again for its "run paused" mark.
  const runIds = new Set(cues?.map((c) => c.run.id))
  const runIdsRef = useRef(runIds)
  runIdsRef.current = runIds
  const { refetch } = inbox
  useEffect(
    () =>
      subscribe(token, PAUSE_CHANGES, undefined, {
        next: (e) => {
          if (runIdsRef.current.has(e.runChanges.id)) void refetch()
        },
        // Without the subscription the inbox's own polling brings the mark, a little later.
        unsupported: () => {},
      }),
    [token, refetch],
  )
  return (
    <>
      <ErrorNote error={inbox.error} />
      {!cues ? (
        !inbox.error && <Loading what="cues" />
      ) : cues.length === 0 ? (
        <p class="empty" data-testid="inbox-empty">
          No cue is waiting.
        </p>
      ) : (
        <ul
          class="cues"
          aria-label={`${cues.length} waiting cue${cues.length === 1 ? '' : 's'}, oldest first`}
        >
          {cues.map((cue, i) => (
            <CueCard
              key={cue.id}
              cue={cue}
              now={now}
              oldest={i === 0}
              onDone={() => {
                setAnswered(new Set([...answered, cue.id]))
                // Live, the change is on its way; polling, read now rather than at the next interval.
                if (!inbox.live) void inbox.refetch()
              }}
            />
          ))}
        </ul>
      )}
    </>
  )
}
