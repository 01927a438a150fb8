/** Small pieces every page uses. */
import type { ComponentChildren } from 'preact'
import { useState } from 'preact/hooks'
import type { ApiError } from './api.ts'
import { duration, relative, splitInstants, viewerZone, when } from './format.ts'
import type { DefinitionState, RunHealth, RunStatus, StepStatus } from './operations.ts'

export function StatusBadge({ status }: { status: RunStatus | StepStatus | DefinitionState }) {
  return <span class={`badge s-${status.toLowerCase()}`}>{status.toLowerCase()}</span>
}

export function HealthBadge({ health }: { health: RunHealth }) {
  return health === 'OK' ? null : <span class="badge s-degraded">degraded</span>
}

/**
 * A time shown relative to now, exact on hover (in `zone`, the page's; default
 * the viewer's) and to screen readers via the datetime attribute.
 */
export function Ago({ iso, now, zone }: { iso: string | null; now: number; zone?: string }) {
  if (!iso) return <span>—</span>
  return (
    <time dateTime={iso} title={when(iso, zone, true)}>
      {relative(iso, now)}
    </time>
  )
}

/** "times out in 2 min 5 s" counting down to a cue's deadline; "deadline passed" once it has. */
export function Countdown({ iso, now, zone }: { iso: string; now: number; zone?: string }) {
  const left = Date.parse(iso) - now
  return (
    <time dateTime={iso} title={when(iso, zone, true)} class={left < 60_000 ? 'urgent' : undefined}>
      {left > 0 ? `times out in ${duration(left)}` : 'deadline passed'}
    </time>
  )
}

export function At({ iso, zone, withZone }: { iso: string | null; zone?: string; withZone?: boolean }) {
  if (!iso) return <span>—</span>
  return <time dateTime={iso}>{when(iso, zone, withZone)}</time>
}

/**
 * Text from the server (a log line, an error) with its ISO-8601 instants
 * written in `zone`, the page's: "retrying at 2026-12-01T18:30:00.000Z"
 * reads "retrying at Tue 1 Dec, 19:30:00" on a page in Europe/Paris.
 */
export function Readable({ text, zone }: { text: string; zone?: string }) {
  return (
    <>
      {splitInstants(text).map((p, i) =>
        typeof p === 'string' ? (
          p
        ) : (
          <time key={i} dateTime={p.iso}>
            {when(p.iso, zone)}
          </time>
        ),
      )}
    </>
  )
}

/** The one zone of a page whose times are the viewer's, named. */
export function ZoneNote() {
  return (
    <p class="muted small" data-testid="page-zone">
      Times on this page are in your time zone, {viewerZone}.
    </p>
  )
}

export function ErrorNote({ error }: { error: ApiError | null }) {
  if (!error) return null
  return (
    <p class="error" role="alert">
      <Readable text={error.message} />
    </p>
  )
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="muted" aria-busy="true">
      Loading {what}…
    </p>
  )
}

export function Section({
  title,
  id,
  children,
  extra,
}: {
  title: string
  id: string
  children: ComponentChildren
  extra?: ComponentChildren
}) {
  return (
    <section class="panel" aria-labelledby={id}>
      <div class="panel-head">
        <h2 id={id}>{title}</h2>
        {extra}
      </div>
      {children}
    </section>
  )
}

/** A button that runs an async action once at a time and reports its outcome. */
export function ActionButton({
  label,
  run,
  kind,
  confirm: confirmText,
}: {
  label: string
  run: () => Promise<unknown>
  kind?: 'danger' | 'primary'
  confirm?: string
}) {
  const [busy, setBusy] = useState(false)
  return (
    <button
      type="button"
      class={kind ?? ''}
      disabled={busy}
      aria-busy={busy}
      onClick={async () => {
        if (confirmText && !window.confirm(confirmText)) return
        setBusy(true)
        try {
          await run()
        } finally {
          setBusy(false)
        }
      }}
    >
      {label}
    </button>
  )
}

/**
 * A button that asks a reason before it acts (skip a step, cancel a run):
 * the first press opens a reason field and a confirming button, so nothing
 * happens on one stray click, and the reason goes with the action.
 */
export function ReasonAction({
  label,
  confirmLabel,
  run,
  kind,
  placeholder,
}: {
  label: string
  confirmLabel: string
  run: (reason: string) => Promise<unknown>
  kind?: 'danger' | 'primary'
  placeholder?: string
}) {
  const [open, setOpen] = useState(false)
  const [reason, setReason] = useState('')
  const [busy, setBusy] = useState(false)
  if (!open)
    return (
      <button type="button" class={kind ?? ''} onClick={() => setOpen(true)}>
        {label}
      </button>
    )
  return (
    <form
      class="reason-form"
      aria-label={label}
      onSubmit={async (e) => {
        e.preventDefault()
        setBusy(true)
        try {
          await run(reason.trim())
          setOpen(false)
          setReason('')
        } finally {
          setBusy(false)
        }
      }}
    >
      <label>
        Reason{' '}
        <input
          value={reason}
          placeholder={placeholder}
          required
          onInput={(e) => setReason((e.target as HTMLInputElement).value)}
          ref={(el) => el?.focus()}
        />
      </label>
      <button type="submit" class={kind ?? ''} disabled={busy || reason.trim() === ''}>
        {confirmLabel}
      </button>
      <button type="button" onClick={() => setOpen(false)}>
        Never mind
      </button>
    </form>
  )
}
