/**
 * A new show (admins): title, slug, zone; a cron with its words and next
 * occurrences as you type, or "once at" a time (a show without a schedule and
 * one run at that time per scope), or by hand only; scopes, grace, key,
 * overlap, calendars; and its program, checked by the server as you type.
 */
import { useMemo, useState } from 'preact/hooks'
import { nextOccurrences } from '../../../src/runner/schedule.ts'
import { ApiError, gql } from '../api.ts'
import { CALENDAR_NAMES, CREATE_DEFINITION, START_RUN_AT } from '../authoringOps.ts'
import { scheduleInWords, viewerZone } from '../format.ts'
import { useLive } from '../live.ts'
import { type Checked, ProgramEditor, parseProgram } from '../programEditor.tsx'
import { go } from '../router.ts'
import { can, useSession } from '../session.ts'
import { At, Section } from '../ui.tsx'

export const STARTER_PROGRAM = {
  phases: [
    {
      name: 'main',
      steps: [
        { kind: 'core.log', params: { message: 'Starting {{definition.title}} on {{run.scope}}' } },
        { kind: 'core.wait', params: { seconds: 60 } },
        { kind: 'core.cue', params: { prompt: 'Go?', timeoutSeconds: 600 } },
      ],
    },
  ],
}

const OVERLAPS = [
  ['ALLOW_ALL', 'allow all: every run starts'],
  ['SKIP', 'skip: a run due while another runs is skipped'],
  ['BUFFER_ONE', 'buffer one: at most one waits for the running one'],
  ['CANCEL_OTHER', 'cancel other: the new run cancels the running one'],
] as const

/** A slug from a title: lowercase letters, digits and "-". */
export function slugOf(title: string): string {
  return title
    .toLowerCase()
    .normalize('NFKD')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 60)
}

function zones(): string[] {
  try {
    return (Intl as unknown as { supportedValuesOf(k: string): string[] }).supportedValuesOf('timeZone')
  } catch {
    return []
  }
}

/** The cron's next occurrences in `zone`, or why there are none. */
function preview(cron: string, zone: string): { at: string[] } | { problem: string } {
  if (cron.trim() === '') return { problem: 'Write a cron expression (minute hour day month weekday).' }
  try {
    return {
      at: nextOccurrences(cron.trim(), zone, { after: new Date(), count: 5 }).map((d) => d.toISOString()),
    }
  } catch (err) {
    return { problem: err instanceof Error ? err.message : String(err) }
  }
}

export function NewShow() {
  const session = useSession()
  const [title, setTitle] = useState('')
  const [slug, setSlug] = useState('')
  const [slugEdited, setSlugEdited] = useState(false)
  const [zone, setZone] = useState(viewerZone)
  const [when, setWhen] = useState<'cron' | 'once' | 'manual'>('cron')
  const [cron, setCron] = useState('30 19 * * *')
  const [onceAt, setOnceAt] = useState('')
  const [scopes, setScopes] = useState('')
  const [grace, setGrace] = useState(300)
  const [concurrencyKey, setConcurrencyKey] = useState('')
  const [overlap, setOverlap] = useState<(typeof OVERLAPS)[number][0]>('ALLOW_ALL')
  const [calendars, setCalendars] = useState<string[]>([])
  const [program, setProgram] = useState(JSON.stringify(STARTER_PROGRAM, null, 2))
  const [checked, setChecked] = useState<Checked>(null)
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const calendarList = useLive(session.token, CALENDAR_NAMES, { pollMs: 60_000 })
  const zoneList = useMemo(zones, [])
  const shownSlug = slugEdited ? slug : slugOf(title)
  const cronPreview = when === 'cron' ? preview(cron, zone) : null
  if (!can(session, 'ADMIN'))
    return (
      <>
        <h1>New show</h1>
        <p class="muted">Only an admin may create a show.</p>
      </>
    )
  const scopeList = scopes
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
  const submit = async (e: Event) => {
    e.preventDefault()
    setError(null)
    const parsed = parseProgram(program)
    if ('problem' in parsed) return setError(`The program ${parsed.problem.message}.`)
    const at = when === 'once' && onceAt ? new Date(onceAt) : null
    if (when === 'once' && (!at || Number.isNaN(at.getTime())))
      return setError('Pick the date and time it runs at.')
    setBusy(true)
    try {
      const made = await gql(session.token, CREATE_DEFINITION, {
        input: {
          title: title.trim(),
          slug: shownSlug,
          timezone: zone,
          schedule: when === 'cron' ? cron.trim() : null,
          scopes: scopeList.length > 0 ? scopeList : [''],
          graceSeconds: grace,
          concurrencyKey: concurrencyKey.trim() || null,
          overlap,
          calendars,
          program: parsed.program,
        },
      })
      const id = made.createDefinition.id
      if (at)
        for (const scope of scopeList.length > 0 ? scopeList : [''])
          await gql(session.token, START_RUN_AT, { definitionId: id, scope, at: at.toISOString() })
      session.notify(`Show ${made.createDefinition.slug} created${at ? ', its run scheduled' : ''}.`)
      go(`/definitions/${id}`)
    } catch (err) {
      setError(err instanceof ApiError ? err.message : String(err))
    } finally {
      setBusy(false)
    }
  }
  return (
    <>
      <h1>New show</h1>
      <form class="authoring" onSubmit={submit} aria-label="New show">
        <Section title="The show" id="show-fields">
          <div class="fields">
            <label>
              Title
              <input required value={title} onInput={(e) => setTitle((e.target as HTMLInputElement).value)} />
            </label>
            <label>
              Slug (set once: lowercase letters, digits, ".", "_", "-")
              <input
                required
                value={shownSlug}
                onInput={(e) => {
                  setSlugEdited(true)
                  setSlug((e.target as HTMLInputElement).value)
                }}
              />
            </label>
            <label>
              Time zone
              <input
                list="zones"
                value={zone}
                onInput={(e) => setZone((e.target as HTMLInputElement).value)}
              />
              <datalist id="zones">
                {zoneList.map((z) => (
                  <option key={z} value={z} />
                ))}
              </datalist>
            </label>
          </div>
        </Section>
        <Section title="When it runs" id="show-when">
          <fieldset class="choice">
            <legend class="visually-hidden">When it runs</legend>
            {(
              [
                ['cron', 'On a schedule'],
                ['once', 'Once, at a date and time'],
                ['manual', 'Started by hand only'],
              ] as const
            ).map(([v, label]) => (
              <label key={v}>
                <input type="radio" name="when" value={v} checked={when === v} onChange={() => setWhen(v)} />{' '}
                {label}
              </label>
            ))}
          </fieldset>
          {when === 'cron' && (
            <div class="fields">
              <label>
                Cron (minute hour day month weekday, in {zone})
                <input value={cron} onInput={(e) => setCron((e.target as HTMLInputElement).value)} />
              </label>
              <p data-testid="cron-words">{scheduleInWords(cron.trim() || null)}</p>
              {cronPreview && 'problem' in cronPreview ? (
                <p class="error">{cronPreview.problem}</p>
              ) : (
                <>
                  <p class="muted small">Next occurrences (in {zone}):</p>
                  <ul class="occurrences" data-testid="cron-next">
                    {cronPreview?.at.map((iso) => (
                      <li key={iso}>
                        <At iso={iso} zone={zone} withZone />
                      </li>
                    ))}
                  </ul>
                </>
              )}
            </div>
          )}
          {when === 'once' && (
            <label>
              Runs at (your time, {viewerZone})
              <input
                type="datetime-local"
                value={onceAt}
                onInput={(e) => setOnceAt((e.target as HTMLInputElement).value)}
              />
            </label>
          )}
        </Section>
        <Section title="How it runs" id="show-how">
          <div class="fields">
            <label>
              Scopes (comma-separated; empty: the default scope)
              <input value={scopes} onInput={(e) => setScopes((e.target as HTMLInputElement).value)} />
            </label>
            <label>
              Grace (seconds a late start is still allowed)
              <input
                type="number"
                min={0}
                value={grace}
                onInput={(e) => setGrace(Number((e.target as HTMLInputElement).value) || 0)}
              />
            </label>
            <label>
              Concurrency key (runs sharing it never overlap; may use {'{{run.scope}}'})
              <input
                value={concurrencyKey}
                onInput={(e) => setConcurrencyKey((e.target as HTMLInputElement).value)}
              />
            </label>
            <label>
              When a run is due while another runs
              <select
                value={overlap}
                onChange={(e) => setOverlap((e.target as HTMLSelectElement).value as typeof overlap)}
              >
                {OVERLAPS.map(([v, label]) => (
                  <option key={v} value={v}>
                    {label}
                  </option>
                ))}
              </select>
            </label>
          </div>
          {(calendarList.data?.calendars.length ?? 0) > 0 && (
            <fieldset class="choice">
              <legend>Blackout calendars it observes</legend>
              {calendarList.data?.calendars.map((c) => (
                <label key={c.name}>
                  <input
                    type="checkbox"
                    checked={calendars.includes(c.name)}
                    onChange={(e) =>
                      setCalendars(
                        (e.target as HTMLInputElement).checked
                          ? [...calendars, c.name]
                          : calendars.filter((n) => n !== c.name),
                      )
                    }
                  />{' '}
                  {c.name}
                </label>
              ))}
            </fieldset>
          )}
        </Section>
        <Section title="Program" id="show-program">
          <ProgramHelp />
          <ProgramEditor
            id="new-program"
            value={program}
            onInput={setProgram}
            onChecked={setChecked}
            slug={shownSlug}
            title={title}
          />
        </Section>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy || checked === null || checked.length > 0}>
          Create show
        </button>
      </form>
    </>
  )
}

/** What a program's keys mean, where the program is written. */
export function ProgramHelp() {
  return (
    <details class="help">
      <summary>How a program is written</summary>
      <p class="small">
        Phases run in order, each a list of steps. Step kinds: <code>core.log</code> (<code>message</code>),{' '}
        <code>core.wait</code> (<code>seconds</code>, or <code>until: "+15m"</code> from the scheduled time),{' '}
        <code>core.cue</code> (<code>prompt</code>, <code>timeoutSeconds</code>,{' '}
        <code>onTimeout: "fail" | "continue"</code>), <code>core.webhook</code> (<code>url</code> allowed by
        WEBHOOK_ALLOW, <code>method</code>, <code>headers</code>, <code>body</code>). A phase with{' '}
        <code>"ending": true</code> is the wrap-up: while in it the run reads "ending", and only ending phases
        may follow it. A step with <code>"onError": "degrade"</code> that fails marks the run degraded and
        lets it go on, instead of failing it. Placeholders: <code>{'{{run.scope}}'}</code>,{' '}
        <code>{'{{params.NAME}}'}</code>, <code>{'{{definition.title}}'}</code>.
      </p>
    </details>
  )
}
