/** Definitions: each schedule in words, its next occurrences, its state and its programs. */
import { useState } from 'preact/hooks'
import { ApiError, gql } from '../api.ts'
import { json, scheduleInWords, scopeLabel, viewerZone } from '../format.ts'
import { useLive, useNow } from '../live.ts'
import {
  DEFINITION,
  DEFINITIONS,
  type DefinitionData,
  type DefinitionState,
  type DefinitionsData,
  SET_DEFINITION_STATE,
  START_RUN,
} from '../operations.ts'
import { go } from '../router.ts'
import { can, type Session, useSession } from '../session.ts'
import { ActionButton, Ago, At, ErrorNote, Loading, Section, StatusBadge } from '../ui.tsx'
import { BulkControls, UpcomingSection } from './ShowOps.tsx'

function Occurrence({ iso, zone }: { iso: string; zone: string }) {
  return (
    <li>
      <At iso={iso} zone={zone} withZone />
      {zone !== viewerZone && (
        <span class="muted">
          {' '}
          · yours: <At iso={iso} withZone />
        </span>
      )}
    </li>
  )
}

async function setState(session: Session, id: string, state: DefinitionState, refetch: () => Promise<void>) {
  try {
    await gql(session.token, SET_DEFINITION_STATE, { id, state })
    session.notify(`Definition is now ${state.toLowerCase()}.`)
  } catch (err) {
    session.notify(err instanceof ApiError ? err.message : String(err), 'error')
  }
  await refetch()
}

function StateControls({
  id,
  state,
  title,
  refetch,
}: {
  id: string
  state: DefinitionState
  title: string
  refetch: () => Promise<void>
}) {
  const session = useSession()
  if (!can(session, 'ADMIN')) return null
  return (
    <fieldset class="controls">
      <legend class="visually-hidden">State of {title}</legend>
      {state === 'ACTIVE' && (
        <ActionButton label="Pause schedule" run={() => setState(session, id, 'PAUSED', refetch)} />
      )}
      {state !== 'ACTIVE' && (
        <ActionButton
          label={state === 'ARCHIVED' ? 'Restore' : 'Resume schedule'}
          run={() => setState(session, id, 'ACTIVE', refetch)}
        />
      )}
      {state !== 'ARCHIVED' && (
        <ActionButton
          label="Archive"
          kind="danger"
          confirm={`Archive ${title}? Its future runs are withdrawn.`}
          run={() => setState(session, id, 'ARCHIVED', refetch)}
        />
      )}
    </fieldset>
  )
}

export function Definitions() {
  const { token } = useSession()
  const q = useLive<DefinitionsData>(token, DEFINITIONS, { pollMs: 10_000 })
  const defs = q.data?.definitions
  if (!defs)
    return (
      <>
        <h1>Definitions</h1>
        {q.error ? <ErrorNote error={q.error} /> : <Loading what="definitions" />}
      </>
    )
  return (
    <>
      <h1>Definitions</h1>
      <ErrorNote error={q.error} />
      {defs.length === 0 ? (
        <p class="empty">No definition yet. Create one over the API (createDefinition).</p>
      ) : (
        <ul class="cards">
          {defs.map((d) => (
            <li key={d.id} class="card">
              <div class="card-head">
                <h2 class="h3">
                  <a href={`#/definitions/${d.id}`}>{d.title}</a>
                </h2>
                <StatusBadge status={d.state} />
              </div>
              <p class="muted small">
                {d.slug} · v{d.currentVersion?.version ?? '—'} · {d.timezone}
              </p>
              <p>{scheduleInWords(d.schedule)}</p>
              {d.state === 'ACTIVE' && d.nextOccurrences.length > 0 && (
                <>
                  <h3 class="h4">Next</h3>
                  <ul class="occurrences">
                    {d.nextOccurrences.map((iso) => (
                      <Occurrence key={iso} iso={iso} zone={d.timezone} />
                    ))}
                  </ul>
                </>
              )}
              <StateControls id={d.id} state={d.state} title={d.title} refetch={q.refetch} />
            </li>
          ))}
        </ul>
      )}
    </>
  )
}

function StartRun({ definitionId, scopes }: { definitionId: string; scopes: string[] }) {
  const session = useSession()
  const [scope, setScope] = useState(scopes[0] ?? '')
  const [rehearsal, setRehearsal] = useState(false)
  const [speed, setSpeed] = useState(1)
  if (!can(session, 'OPERATOR')) return null
  return (
    <form
      class="controls"
      aria-label="Start a run"
      onSubmit={async (e) => {
        e.preventDefault()
        try {
          const data = await gql(session.token, START_RUN, {
            definitionId,
            scope,
            rehearsal,
            speed: rehearsal ? speed : 1,
          })
          session.notify(`Run ${data.startRun.id} started.`)
          go(`/runs/${data.startRun.id}`)
        } catch (err) {
          session.notify(err instanceof ApiError ? err.message : String(err), 'error')
        }
      }}
    >
      <label>
        Scope{' '}
        <select value={scope} onChange={(e) => setScope((e.target as HTMLSelectElement).value)}>
          {scopes.map((s) => (
            <option key={s} value={s}>
              {scopeLabel(s)}
            </option>
          ))}
        </select>
      </label>
      <label>
        <input
          type="checkbox"
          checked={rehearsal}
          onChange={(e) => setRehearsal((e.target as HTMLInputElement).checked)}
        />{' '}
        rehearsal
      </label>
      {rehearsal && (
        <label>
          at speed{' '}
          <input
            type="number"
            min={1}
            max={3600}
            step="any"
            value={speed}
            onInput={(e) => setSpeed(Number((e.target as HTMLInputElement).value) || 1)}
          />
        </label>
      )}
      <button type="submit" class="primary">
        Start a run now
      </button>
    </form>
  )
}

export function DefinitionPage({ id }: { id: string }) {
  const { token } = useSession()
  const now = useNow()
  const q = useLive<DefinitionData>(token, DEFINITION, { variables: { id }, pollMs: 5000 })
  const d = q.data?.definition
  if (q.data && !d)
    return (
      <>
        <h1>Definition {id}</h1>
        <p class="error">No definition has id {id}.</p>
      </>
    )
  if (!d || !q.data)
    return (
      <>
        <h1>Definition {id}</h1>
        {q.error ? <ErrorNote error={q.error} /> : <Loading what={`definition ${id}`} />}
      </>
    )
  return (
    <>
      <h1>
        {d.title} <StatusBadge status={d.state} />
      </h1>
      <ErrorNote error={q.error} />
      {d.description && <p>{d.description}</p>}
      <dl class="facts">
        <dt>Schedule</dt>
        <dd>
          {scheduleInWords(d.schedule)}
          {d.schedule && <code class="muted"> ({d.schedule})</code>}
        </dd>
        <dt>Time zone</dt>
        <dd>{d.timezone}</dd>
        <dt>Scopes</dt>
        <dd>{d.scopes.map(scopeLabel).join(', ')}</dd>
        <dt>Grace</dt>
        <dd>{d.graceSeconds} s</dd>
        <dt>Concurrency key</dt>
        <dd>{d.concurrencyKey ?? 'none'}</dd>
        <dt>Slug</dt>
        <dd>{d.slug}</dd>
      </dl>
      <StateControls id={d.id} state={d.state} title={d.title} refetch={q.refetch} />
      {d.state !== 'ARCHIVED' && <StartRun definitionId={d.id} scopes={d.scopes} />}
      <BulkControls definitionId={d.id} title={d.title} />
      {d.schedule && <UpcomingSection definitionId={d.id} zone={d.timezone} />}
      <div class="columns">
        <Section title="Next occurrences" id="next-occurrences">
          {d.state !== 'ACTIVE' ? (
            <p class="muted">The schedule is {d.state.toLowerCase()}.</p>
          ) : d.nextOccurrences.length === 0 ? (
            <p class="muted">None: started by hand only.</p>
          ) : (
            <>
              <p class="muted small">
                In {d.timezone}
                {d.timezone !== viewerZone && `, and in yours (${viewerZone})`}.
              </p>
              <ul class="occurrences">
                {d.nextOccurrences.map((iso) => (
                  <Occurrence key={iso} iso={iso} zone={d.timezone} />
                ))}
              </ul>
            </>
          )}
        </Section>
        <Section title="Recent runs" id="recent-runs">
          {q.data.runs.length === 0 ? (
            <p class="muted">No run yet.</p>
          ) : (
            <ul class="rows compact">
              {q.data.runs.map((r) => (
                <li key={r.id} class="row">
                  <a href={`#/runs/${r.id}`}>
                    <At iso={r.scheduledFor} />
                  </a>{' '}
                  <span class="muted">{scopeLabel(r.scope)}</span> <StatusBadge status={r.status} />{' '}
                  <span class="muted">
                    <Ago iso={r.scheduledFor} now={now} />
                  </span>
                </li>
              ))}
            </ul>
          )}
        </Section>
      </div>
      <Section title="Program versions" id="versions">
        {d.versions.map((v, i) => (
          <details key={v.id} open={i === 0}>
            <summary>
              Version {v.version}
              {i === 0 && ' (current)'} · <At iso={v.createdAt} />
              {v.createdBy && ` · ${v.createdBy}`}
            </summary>
            <pre>{json(v.program)}</pre>
          </details>
        ))}
      </Section>
    </>
  )
}
