/** Definitions: each schedule in words, its next occurrences, its state and its programs. */
import { useState } from 'preact/hooks'
import { ApiError, gql } from '../api.ts'
import { PUBLISH_VERSION, START_RUN_AT } from '../authoringOps.ts'
import { json, scheduleInWords, scopeLabel, viewerZone } from '../format.ts'
import { useLive, useNow } from '../live.ts'
import {
  DEFINITION,
  DEFINITIONS,
  type DefinitionData,
  type DefinitionState,
  type DefinitionsData,
  SET_DEFINITION_STATE,
} from '../operations.ts'
import { type Checked, ProgramEditor, parseProgram } from '../programEditor.tsx'
import { go } from '../router.ts'
import { can, type Session, useSession } from '../session.ts'
import { ActionButton, Ago, At, ErrorNote, Loading, Section, StatusBadge, ZoneNote } from '../ui.tsx'
import { ProgramHelp } from './NewShow.tsx'
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
  scheduled,
  refetch,
}: {
  id: string
  state: DefinitionState
  title: string
  /** Has a schedule: "Pause schedule" means nothing for a show started by hand only. */
  scheduled: boolean
  refetch: () => Promise<void>
}) {
  const session = useSession()
  if (!can(session, 'ADMIN')) return null
  return (
    <fieldset class="controls">
      <legend class="visually-hidden">State of {title}</legend>
      {state === 'ACTIVE' && scheduled && (
        <ActionButton label="Pause schedule" run={() => setState(session, id, 'PAUSED', refetch)} />
      )}
      {state !== 'ACTIVE' && (
        <ActionButton
          label={state === 'ARCHIVED' ? 'Restore' : scheduled ? 'Resume schedule' : 'Set active'}
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
  const session = useSession()
  const { token } = session
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
      <ZoneNote />
      {can(session, 'ADMIN') && (
        <p>
          <a href="#/definitions/new" class="button primary">
            New show
          </a>
        </p>
      )}
      <ErrorNote error={q.error} />
      {defs.length === 0 ? (
        <p class="empty">
          No definition yet.{' '}
          {can(session, 'ADMIN') ? (
            <a href="#/definitions/new">Create the first show</a>
          ) : (
            'An admin can create one.'
          )}
        </p>
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
              <StateControls
                id={d.id}
                state={d.state}
                title={d.title}
                scheduled={d.schedule !== null}
                refetch={q.refetch}
              />
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
  const [at, setAt] = useState('')
  const [params, setParams] = useState('')
  const [error, setError] = useState<string | null>(null)
  if (!can(session, 'OPERATOR')) return null
  return (
    <Section title="Start a run" id="start-run">
      <form
        class="filters"
        aria-label="Start a run"
        onSubmit={async (e) => {
          e.preventDefault()
          setError(null)
          let parsed: unknown = null
          if (params.trim() !== '') {
            try {
              parsed = JSON.parse(params)
            } catch (err) {
              return setError(`Params are not valid JSON (${(err as Error).message}).`)
            }
          }
          const instant = at ? new Date(at) : null
          if (instant && Number.isNaN(instant.getTime())) return setError('Pick a valid date and time.')
          try {
            const data = await gql(session.token, START_RUN_AT, {
              definitionId,
              scope,
              rehearsal,
              speed: rehearsal ? speed : 1,
              at: instant ? instant.toISOString() : null,
              params: parsed,
            })
            session.notify(
              instant ? `Run ${data.startRun.id} scheduled.` : `Run ${data.startRun.id} started.`,
            )
            go(`/runs/${data.startRun.id}`)
          } catch (err) {
            setError(err instanceof ApiError ? err.message : String(err))
          }
        }}
      >
        <label>
          Scope
          <select value={scope} onChange={(e) => setScope((e.target as HTMLSelectElement).value)}>
            {scopes.map((s) => (
              <option key={s} value={s}>
                {scopeLabel(s)}
              </option>
            ))}
          </select>
        </label>
        <label>
          At (your time, {viewerZone}; empty: now)
          <input
            type="datetime-local"
            value={at}
            onInput={(e) => setAt((e.target as HTMLInputElement).value)}
          />
        </label>
        <label class="grow">
          Params (JSON object, read as {'{{params.NAME}}'})
          <input
            value={params}
            placeholder='{"name": "Ada"}'
            onInput={(e) => setParams((e.target as HTMLInputElement).value)}
          />
        </label>
        <label>
          <span>
            <input
              type="checkbox"
              checked={rehearsal}
              onChange={(e) => setRehearsal((e.target as HTMLInputElement).checked)}
            />{' '}
            rehearsal
          </span>
        </label>
        {rehearsal && (
          <label>
            at speed
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
          {at ? 'Schedule the run' : 'Start a run now'}
        </button>
      </form>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
    </Section>
  )
}

/** Edit the program and publish it as a new version, checked by the server and diffed against the current one. */
function EditProgram({
  definitionId,
  slug,
  title,
  current,
  version,
  refetch,
}: {
  definitionId: string
  slug: string
  title: string
  current: unknown
  version: number
  refetch: () => Promise<void>
}) {
  const session = useSession()
  const [open, setOpen] = useState(false)
  const [text, setText] = useState(() => json(current))
  const [checked, setChecked] = useState<Checked>(null)
  const [error, setError] = useState<string | null>(null)
  if (!can(session, 'ADMIN')) return null
  if (!open)
    return (
      <p>
        <button
          type="button"
          onClick={() => {
            setText(json(current))
            setOpen(true)
          }}
        >
          Edit the program
        </button>
      </p>
    )
  return (
    <Section title={`New version (after version ${version})`} id="edit-program">
      <ProgramHelp />
      <ProgramEditor
        id="edit-program-text"
        value={text}
        onInput={setText}
        onChecked={setChecked}
        slug={slug}
        title={title}
        current={current}
      />
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <div class="controls">
        <button
          type="button"
          class="primary"
          disabled={checked === null || checked.length > 0}
          onClick={async () => {
            setError(null)
            const parsed = parseProgram(text)
            if ('problem' in parsed) return
            try {
              const data = await gql(session.token, PUBLISH_VERSION, {
                definitionId,
                program: parsed.program,
              })
              session.notify(`Version ${data.publishVersion.version} published.`)
              setOpen(false)
              await refetch()
            } catch (err) {
              setError(err instanceof ApiError ? err.message : String(err))
            }
          }}
        >
          Publish version {version + 1}
        </button>
        <button type="button" onClick={() => setOpen(false)}>
          Discard
        </button>
      </div>
    </Section>
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
      <StateControls
        id={d.id}
        state={d.state}
        title={d.title}
        scheduled={d.schedule !== null}
        refetch={q.refetch}
      />
      {d.state !== 'ARCHIVED' && <StartRun definitionId={d.id} scopes={d.scopes} />}
      {d.state !== 'ARCHIVED' && d.versions[0] && (
        <EditProgram
          key={d.versions[0].version}
          definitionId={d.id}
          slug={d.slug}
          title={d.title}
          current={d.versions[0].program}
          version={d.versions[0].version}
          refetch={q.refetch}
        />
      )}
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
