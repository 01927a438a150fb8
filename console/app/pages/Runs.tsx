/**
 * Every run, newest first: filtered by status, show, scope, scheduled time and
 * rehearsal; paged by cursor (the server's `runPage`, which pages forward only,
 * so "Previous" goes back through the cursors this page has followed); live
 * (`runChanges` over the same filter, or polling); and, for operators, the
 * bulk actions over everything the filter selects, counted first.
 */
import { useEffect, useState } from 'preact/hooks'
import { ApiError, gql } from '../api.ts'
import { scopeLabel, viewerZone } from '../format.ts'
import { useLive, useNow } from '../live.ts'
import type { RunStatus } from '../operations.ts'
import {
  RUN_FILTER_CHOICES,
  RUNS,
  RUNS_LIVE,
  RUNS_PAGE_SIZE,
  type RunFilterInput,
  type RunsData,
} from '../runsOps.ts'
import { can, useSession } from '../session.ts'
import { BULK_RUNS, type BulkData } from '../showOps.ts'
import { Ago, At, ErrorNote, HealthBadge, Loading, Section, StatusBadge } from '../ui.tsx'

const STATUSES: RunStatus[] = [
  'SCHEDULED',
  'STARTING',
  'RUNNING',
  'PAUSED',
  'ENDING',
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'MISSED',
]
const IN_PROGRESS: RunStatus[] = ['STARTING', 'RUNNING', 'PAUSED', 'ENDING']

/** The filter as the form holds it (text fields; empty = no condition). */
export interface RunsForm {
  status: string
  definitionId: string
  scope: string
  scopeSet: boolean
  from: string
  to: string
  rehearsal: '' | 'only' | 'none'
}

const EMPTY: RunsForm = {
  status: '',
  definitionId: '',
  scope: '',
  scopeSet: false,
  from: '',
  to: '',
  rehearsal: '',
}

/** The form's filter from a route's query (`#/runs?status=FAILED&definition=3`), so links can point at a view. */
export function formFromQuery(query: string): RunsForm {
  const q = new URLSearchParams(query)
  const rehearsal = q.get('rehearsal')
  return {
    ...EMPTY,
    status: q.get('status') ?? '',
    definitionId: q.get('definition') ?? '',
    scope: q.get('scope') ?? '',
    scopeSet: q.has('scope'),
    rehearsal: rehearsal === 'only' || rehearsal === 'none' ? rehearsal : '',
  }
}

/** A datetime-local value (the viewer's wall clock) as an instant; null when empty or not a time. */
function instant(local: string): string | null {
  if (local === '') return null
  const t = new Date(local)
  return Number.isNaN(t.getTime()) ? null : t.toISOString()
}

function toFilter(form: RunsForm): RunFilterInput {
  const filter: RunFilterInput = {}
  if (form.status === 'IN_PROGRESS') filter.statuses = IN_PROGRESS
  else if (form.status !== '') filter.statuses = [form.status as RunStatus]
  if (form.definitionId !== '') filter.definitionId = form.definitionId
  if (form.scopeSet) filter.scope = form.scope.trim()
  const after = instant(form.from)
  const before = instant(form.to)
  if (after) filter.scheduledAfter = after
  if (before) filter.scheduledBefore = before
  if (form.rehearsal !== '') filter.rehearsal = form.rehearsal === 'only'
  return filter
}

function Filters({
  form,
  onChange,
  definitions,
}: {
  form: RunsForm
  onChange: (next: RunsForm) => void
  definitions: { id: string; title: string; slug: string }[]
}) {
  const set = (patch: Partial<RunsForm>) => onChange({ ...form, ...patch })
  return (
    <form class="filters" aria-label="Filter runs" onSubmit={(e) => e.preventDefault()}>
      <label>
        Status
        <select value={form.status} onChange={(e) => set({ status: (e.target as HTMLSelectElement).value })}>
          <option value="">any</option>
          <option value="IN_PROGRESS">in progress</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s.toLowerCase()}
            </option>
          ))}
        </select>
      </label>
      <label>
        Show
        <select
          value={form.definitionId}
          onChange={(e) => set({ definitionId: (e.target as HTMLSelectElement).value })}
        >
          <option value="">any</option>
          {definitions.map((d) => (
            <option key={d.id} value={d.id}>
              {d.title} ({d.slug})
            </option>
          ))}
        </select>
      </label>
      <label>
        Scope
        <input
          value={form.scope}
          placeholder="any"
          onInput={(e) => {
            const scope = (e.target as HTMLInputElement).value
            set({ scope, scopeSet: scope !== '' })
          }}
        />
      </label>
      <label>
        Scheduled from ({viewerZone})
        <input
          type="datetime-local"
          value={form.from}
          onInput={(e) => set({ from: (e.target as HTMLInputElement).value })}
        />
      </label>
      <label>
        until ({viewerZone})
        <input
          type="datetime-local"
          value={form.to}
          onInput={(e) => set({ to: (e.target as HTMLInputElement).value })}
        />
      </label>
      <label>
        Rehearsals
        <select
          value={form.rehearsal}
          onChange={(e) => set({ rehearsal: (e.target as HTMLSelectElement).value as RunsForm['rehearsal'] })}
        >
          <option value="">included</option>
          <option value="none">real runs only</option>
          <option value="only">rehearsals only</option>
        </select>
      </label>
      <button type="button" onClick={() => onChange(EMPTY)}>
        Clear filters
      </button>
    </form>
  )
}

const VERBS: Record<'PAUSE' | 'RESUME' | 'CANCEL', [string, string]> = {
  PAUSE: ['Pause', 'Paused'],
  RESUME: ['Resume', 'Resumed'],
  CANCEL: ['Cancel', 'Cancelled'],
}

/** Pause, resume or cancel every run the filter selects: counted (a dry run) before it is confirmed. */
function BulkActions({ filter, onDone }: { filter: RunFilterInput; onDone: () => Promise<void> }) {
  const session = useSession()
  const [action, setAction] = useState<'PAUSE' | 'RESUME' | 'CANCEL'>('PAUSE')
  const [reason, setReason] = useState('')
  const [counted, setCounted] = useState<BulkData['bulkRuns'] | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const filterKey = JSON.stringify(filter)
  // A count is for one filter and one action: changing either asks again.
  useEffect(() => setCounted(null), [filterKey, action])
  const send = async (dryRun: boolean) => {
    setBusy(true)
    setError(null)
    try {
      const data = await gql(session.token, BULK_RUNS, {
        action,
        filter,
        dryRun,
        reason: reason.trim() || null,
      })
      if (dryRun) setCounted(data.bulkRuns)
      else {
        setCounted(null)
        session.notify(
          `${VERBS[action][1]} ${data.bulkRuns.applied} run${data.bulkRuns.applied === 1 ? '' : 's'}.`,
        )
        await onDone()
      }
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err))
    } finally {
      setBusy(false)
    }
  }
  return (
    <Section title="Act on every run the filter selects" id="bulk">
      <div class="filters">
        <label>
          Action
          <select
            value={action}
            onChange={(e) => setAction((e.target as HTMLSelectElement).value as typeof action)}
          >
            <option value="PAUSE">pause</option>
            <option value="RESUME">resume</option>
            <option value="CANCEL">cancel</option>
          </select>
        </label>
        <label class="grow">
          Reason (kept in each run's log)
          <input value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
        </label>
        <button type="button" disabled={busy} onClick={() => send(true)}>
          Count the runs
        </button>
      </div>
      {counted && (
        <p data-testid="bulk-count">
          {counted.matched === 0 ? (
            <>No run the filter selects can be {VERBS[action][1].toLowerCase()} now.</>
          ) : (
            <>
              {counted.matched} run{counted.matched === 1 ? '' : 's'} would be{' '}
              {VERBS[action][1].toLowerCase()}.{' '}
              <button
                type="button"
                class={action === 'CANCEL' ? 'danger' : 'primary'}
                disabled={busy}
                onClick={() => send(false)}
              >
                {VERBS[action][0]} {counted.matched} run{counted.matched === 1 ? '' : 's'}
              </button>
            </>
          )}
        </p>
      )}
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
    </Section>
  )
}

export function Runs({ query }: { query: string }) {
  const session = useSession()
  const now = useNow()
  const [form, setForm] = useState<RunsForm>(() => formFromQuery(query))
  // The cursors followed to reach this page; the first page has none.
  const [cursors, setCursors] = useState<(string | null)[]>([null])
  const filter = toFilter(form)
  const after = cursors[cursors.length - 1] ?? null
  const choices = useLive(session.token, RUN_FILTER_CHOICES, { pollMs: 60_000 })
  const runs = useLive<RunsData>(session.token, RUNS, {
    variables: { filter, first: RUNS_PAGE_SIZE, after },
    subscription: { query: RUNS_LIVE, variables: { filter } },
    livePollMs: 10_000,
  })
  const change = (next: RunsForm) => {
    setForm(next)
    setCursors([null])
  }
  const page = runs.data?.runPage
  return (
    <>
      <h1>Runs</h1>
      <Filters form={form} onChange={change} definitions={choices.data?.definitions ?? []} />
      <ErrorNote error={runs.error} />
      <Section
        title={`Runs, newest first (page ${cursors.length})`}
        id="runs-list"
        extra={<span class="muted small">{runs.live ? 'live' : 'polling'}</span>}
      >
        {!page ? (
          runs.error ? null : (
            <Loading what="the runs" />
          )
        ) : page.nodes.length === 0 ? (
          <p class="muted">No run matches.</p>
        ) : (
          <table class="keys runs" data-testid="runs">
            <caption class="visually-hidden">Runs; times in your zone ({viewerZone})</caption>
            <thead>
              <tr>
                <th scope="col">Show</th>
                <th scope="col">Scope</th>
                <th scope="col">Status</th>
                <th scope="col">Scheduled ({viewerZone})</th>
                <th scope="col">Ended</th>
              </tr>
            </thead>
            <tbody>
              {page.nodes.map((r) => (
                <tr key={r.id}>
                  <td>
                    <a href={`#/runs/${r.id}`}>{r.definition.title}</a>{' '}
                    {r.rehearsal && <span class="badge s-rehearsal">rehearsal</span>}
                  </td>
                  <td>{scopeLabel(r.scope)}</td>
                  <td>
                    <StatusBadge status={r.status} /> <HealthBadge health={r.health} />
                  </td>
                  <td>
                    <At iso={r.scheduledFor} />
                  </td>
                  <td>{r.endedAt ? <Ago iso={r.endedAt} now={now} /> : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        <nav class="pager" aria-label="Pages of runs">
          <button
            type="button"
            disabled={cursors.length === 1}
            onClick={() => setCursors(cursors.slice(0, -1))}
          >
            Previous page
          </button>
          <button
            type="button"
            disabled={!page?.pageInfo.hasNextPage}
            onClick={() => page?.pageInfo.endCursor && setCursors([...cursors, page.pageInfo.endCursor])}
          >
            Next page
          </button>
        </nav>
      </Section>
      {can(session, 'OPERATOR') && <BulkActions filter={filter} onDone={runs.refetch} />}
    </>
  )
}
