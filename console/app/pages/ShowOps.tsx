/**
 * The calendar and operating many shows, on the definition and run pages:
 * what the schedule will do next (with blackout days, skips and moves), bulk
 * actions with their dry-run count shown before confirming, retrying a failed
 * run, and a rehearsal's clock.
 */
import { useState } from 'preact/hooks'
import { ApiError, gql } from '../api.ts'
import { scopeLabel } from '../format.ts'
import { useLive, useNow } from '../live.ts'
import { go } from '../router.ts'
import { can, useSession } from '../session.ts'
import {
  BULK_RUNS,
  RETRY_RUN,
  RUN_ORIGINS,
  type RunOriginsData,
  SKIP_OCCURRENCE,
  UPCOMING,
  type UpcomingData,
} from '../showOps.ts'
import { ActionButton, At, ErrorNote, Section } from '../ui.tsx'

/** The next occurrences, each with what will happen to it. */
export function UpcomingSection({ definitionId, zone }: { definitionId: string; zone: string }) {
  const session = useSession()
  const q = useLive<UpcomingData>(session.token, UPCOMING, { variables: { id: definitionId }, pollMs: 5000 })
  const d = q.data?.definition
  const operator = can(session, 'OPERATOR')
  async function skip(at: string, scope: string) {
    const reason = window.prompt(`Why is the ${scopeLabel(scope)} occurrence skipped?`)
    if (!reason) return
    try {
      await gql(session.token, SKIP_OCCURRENCE, { definitionId, at, scope, reason })
      session.notify('Occurrence skipped.')
    } catch (err) {
      session.notify(err instanceof ApiError ? err.message : String(err), 'error')
    }
    await q.refetch()
  }
  return (
    <Section title="Upcoming" id="upcoming">
      <ErrorNote error={q.error} />
      {d && d.calendars.length > 0 && (
        <p class="muted small">Observes {d.calendars.map((c) => c.name).join(', ')}.</p>
      )}
      {d && d.upcoming.length === 0 && <p class="muted">Nothing upcoming.</p>}
      {d && d.upcoming.length > 0 && (
        <ul class="rows compact" aria-label="Upcoming occurrences">
          {d.upcoming.map((o) => (
            <li key={`${o.at}|${o.scope}|${o.status}`} class={`row occ-${o.status.toLowerCase()}`}>
              <At iso={o.at} zone={zone} /> <span class="muted">{scopeLabel(o.scope)}</span>{' '}
              <span class={`badge s-${o.status.toLowerCase()}`}>{o.status.toLowerCase()}</span>
              {o.movedTo && (
                <>
                  {' '}
                  to <At iso={o.movedTo} zone={zone} />
                </>
              )}
              {o.reason && <span class="muted"> · {o.reason}</span>}
              {o.run && (
                <>
                  {' '}
                  <a href={`#/runs/${o.run.id}`}>run {o.run.id}</a>
                </>
              )}
              {operator && o.status === 'SCHEDULED' && !o.reason && (
                <>
                  {' '}
                  <button type="button" class="link" onClick={() => skip(o.at, o.scope)}>
                    Skip
                  </button>
                </>
              )}
            </li>
          ))}
        </ul>
      )}
    </Section>
  )
}

type Action = 'CANCEL' | 'PAUSE' | 'RESUME'

/** Pause, resume or cancel the runs of a definition, with the dry run's count shown before confirming. */
export function BulkControls({ definitionId, title }: { definitionId: string; title: string }) {
  const session = useSession()
  const [action, setAction] = useState<Action>('CANCEL')
  const [counted, setCounted] = useState<{ action: Action; matched: number } | null>(null)
  if (!can(session, 'OPERATOR')) return null
  const filter = { definitionId }
  async function dryRun() {
    try {
      const data = await gql(session.token, BULK_RUNS, { action, filter, dryRun: true })
      setCounted({ action, matched: data.bulkRuns.matched })
    } catch (err) {
      session.notify(err instanceof ApiError ? err.message : String(err), 'error')
    }
  }
  async function apply() {
    try {
      const data = await gql(session.token, BULK_RUNS, {
        action,
        filter,
        dryRun: false,
        reason: `from the console by ${session.actor}`,
      })
      session.notify(
        `Bulk ${action.toLowerCase()} ${data.bulkRuns.bulkId}: ${data.bulkRuns.applied} runs changed.`,
      )
    } catch (err) {
      session.notify(err instanceof ApiError ? err.message : String(err), 'error')
    }
    setCounted(null)
  }
  const ready = counted !== null && counted.action === action
  return (
    <form
      class="controls"
      aria-label="Act on many runs"
      onSubmit={(e) => {
        e.preventDefault()
        void dryRun()
      }}
    >
      <label>
        Every run of this show:{' '}
        <select
          value={action}
          onChange={(e) => {
            setAction((e.target as HTMLSelectElement).value as Action)
            setCounted(null)
          }}
        >
          <option value="CANCEL">cancel</option>
          <option value="PAUSE">pause</option>
          <option value="RESUME">resume</option>
        </select>
      </label>
      <button type="submit">Count</button>
      {ready && (
        <>
          <output aria-live="polite">
            {counted.matched} run{counted.matched === 1 ? '' : 's'} would change
          </output>
          {counted.matched > 0 && (
            <ActionButton
              label={`${action.toLowerCase()} ${counted.matched}`}
              kind="danger"
              confirm={`${action.toLowerCase()} ${counted.matched} runs of ${title}?`}
              run={apply}
            />
          )}
        </>
      )}
    </form>
  )
}

/** "1:02:03" */
function clock(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000))
  const hms = [Math.floor(s / 3600), Math.floor(s / 60) % 60, s % 60]
  return `${hms[0]}:${String(hms[1]).padStart(2, '0')}:${String(hms[2]).padStart(2, '0')}`
}

/** Where a run came from (a retry, bulk actions), its rehearsal clock, and the retry of a failed run. */
export function RunOrigins({
  id,
  status,
  ended,
  failedStep = null,
  stepCount = 0,
}: {
  id: string
  status: string
  ended: string | null
  /** The seq of the step that failed the run, if it did. */
  failedStep?: number | null
  stepCount?: number
}) {
  const session = useSession()
  const now = useNow(250)
  const q = useLive<RunOriginsData>(session.token, RUN_ORIGINS, { variables: { id }, pollMs: 5000 })
  const run = q.data?.run
  if (!run) return null
  const until = ended ? Date.parse(ended) : now
  const showTime = run.startedAt ? (until - Date.parse(run.startedAt)) * run.speed : null
  return (
    <div class="run-origins">
      {run.rehearsal && showTime !== null && (
        <p>
          <span class="badge s-rehearsal">rehearsal ×{run.speed}</span>{' '}
          <span class="show-clock">show time {clock(showTime)}</span>
        </p>
      )}
      {run.retryOf && (
        <p class="muted">
          Retry of <a href={`#/runs/${run.retryOf.id}`}>run {run.retryOf.id}</a>.
        </p>
      )}
      {run.bulkIds.length > 0 && <p class="muted">Changed by bulk action {run.bulkIds.join(', ')}.</p>}
      {status === 'FAILED' && can(session, 'OPERATOR') && (
        <fieldset class="controls">
          <legend>Recover (one retry per failed run)</legend>
          {(
            [
              ['Retry from the failed step', undefined],
              ...(failedStep !== null && failedStep + 1 < stepCount
                ? ([['Skip the failed step and go on', failedStep + 1]] as const)
                : []),
              ['Run again from the start', 0],
            ] as const
          ).map(([label, fromStep]) => (
            <ActionButton
              key={label}
              label={label}
              kind={fromStep === undefined ? 'primary' : undefined}
              run={async () => {
                try {
                  const data = await gql(session.token, RETRY_RUN, { id, fromStep: fromStep ?? null })
                  session.notify(`Retried as run ${data.retryRun.id}.`)
                  go(`/runs/${data.retryRun.id}`)
                } catch (err) {
                  session.notify(err instanceof ApiError ? err.message : String(err), 'error')
                }
              }}
            />
          ))}
        </fieldset>
      )}
    </div>
  )
}
