/**
 * The program editor: JSON in a textarea, checked by the server as you type
 * (applyDefinitions as a dry run, so the answer is what publishing would say),
 * each problem listed at its JSON path and line, a button away from the
 * place in the text (jsonPaths.ts); and a line diff against the version it
 * replaces.
 */
import { useEffect, useMemo, useRef, useState } from 'preact/hooks'
import { ApiError, gql } from './api.ts'
import { CHECK_MANIFESTS } from './authoringOps.ts'
import { jsonPlaces, type Place, placeOf } from './jsonPaths.ts'
import { addField, fieldsAt } from './programFields.ts'
import { useSession } from './session.ts'

export interface ProgramProblem {
  path: string
  message: string
}

/** The program's problems (paths relative to the program), or null while the server is asked. */
export type Checked = ProgramProblem[] | null

/** A program path as a manifest problem names it (`[0].program.phases[0]…`), relative to the program. */
function programPath(path: string): string {
  if (path === '[0].program') return 'program'
  if (path.startsWith('[0].program.')) return path.slice('[0].program.'.length)
  return path.replace(/^\[0\]\./, '')
}

/** Parse the text; a problem at the top when it is not JSON. */
export function parseProgram(text: string): { program: unknown } | { problem: ProgramProblem } {
  try {
    return { program: JSON.parse(text) }
  } catch (err) {
    return { problem: { path: 'program', message: `is not valid JSON (${(err as Error).message})` } }
  }
}

export function ProgramEditor({
  id,
  value,
  onInput,
  onChecked,
  slug,
  title,
  current,
}: {
  id: string
  value: string
  onInput: (text: string) => void
  onChecked: (checked: Checked) => void
  /** The manifest's slug and title the check is made with (a draft name when empty). */
  slug: string
  title: string
  /** The current version's program, to diff against. */
  current?: unknown
}) {
  const session = useSession()
  const [problems, setProblems] = useState<Checked>(null)
  useEffect(() => {
    let stale = false
    setProblems(null)
    onChecked(null)
    const parsed = parseProgram(value)
    if ('problem' in parsed) {
      setProblems([parsed.problem])
      onChecked([parsed.problem])
      return
    }
    const t = setTimeout(async () => {
      let found: ProgramProblem[] = []
      try {
        await gql(session.token, CHECK_MANIFESTS, {
          manifests: [
            { slug: slug.trim() || 'draft-check', title: title.trim() || 'Draft', program: parsed.program },
          ],
        })
      } catch (err) {
        found =
          err instanceof ApiError && err.problems.length > 0
            ? err.problems.map((p) => ({ path: programPath(p.path), message: p.message }))
            : [{ path: 'program', message: err instanceof Error ? err.message : String(err) }]
      }
      if (stale) return
      setProblems(found)
      onChecked(found)
    }, 350)
    return () => {
      stale = true
      clearTimeout(t)
    }
  }, [value, slug, title])
  const problemsId = `${id}-problems`
  const area = useRef<HTMLTextAreaElement>(null)
  // Where each path is written, for the problems of this text (read only when there are some).
  const places = useMemo(
    () => (problems && problems.length > 0 && !('problem' in parseProgram(value)) ? jsonPlaces(value) : null),
    [problems, value],
  )
  // Completion: the fields the committed JSON Schema allows where the cursor is.
  const [cursor, setCursor] = useState<number | null>(null)
  const hints = useMemo(() => (cursor === null ? null : fieldsAt(value, cursor)), [value, cursor])
  const pendingCursor = useRef<number | null>(null)
  useEffect(() => {
    const el = area.current
    const at = pendingCursor.current
    if (!el || at === null) return
    pendingCursor.current = null
    el.focus()
    el.setSelectionRange(at, at)
    setCursor(at)
  }, [value])
  const track = (e: Event) => setCursor((e.target as HTMLTextAreaElement).selectionStart)
  /** Put the cursor on the problem's line, the line selected, in view. */
  const show = (place: Place) => {
    const el = area.current
    if (!el) return
    const end = value.indexOf('\n', place.offset)
    el.focus()
    el.setSelectionRange(place.offset, end === -1 ? value.length : end)
    setCursor(place.offset)
    const lineHeight = Number.parseFloat(getComputedStyle(el).lineHeight) || 18
    el.scrollTop = Math.max(0, (place.line - 3) * lineHeight)
  }
  return (
    <div class="program-editor">
      <label for={id}>Program (JSON)</label>
      <textarea
        ref={area}
        id={id}
        rows={18}
        spellcheck={false}
        value={value}
        aria-describedby={problemsId}
        aria-invalid={problems !== null && problems.length > 0}
        onInput={(e) => {
          onInput((e.target as HTMLTextAreaElement).value)
          track(e)
        }}
        onKeyUp={track}
        onClick={track}
        onFocus={track}
      />
      {hints && hints.fields.length > 0 && (
        <div class="field-hints small" data-testid="field-hints">
          <span class="muted">
            Fields for {hints.path === '' ? 'the program' : <code>{hints.path}</code>}:
          </span>{' '}
          {hints.fields.map((f) => (
            <button
              key={f.key}
              type="button"
              class="chip"
              title={f.description ?? undefined}
              aria-label={`Add ${f.key}${f.required ? ' (required)' : ''}${f.description ? `: ${f.description}` : ''}`}
              onClick={() => {
                const at = cursor ?? 0
                const next = addField(value, at, f)
                pendingCursor.current = next.cursor
                onInput(next.text)
              }}
            >
              {f.key}
              {f.required ? ' *' : ''}
            </button>
          ))}
        </div>
      )}
      <div id={problemsId} aria-live="polite" data-testid="program-problems">
        {problems === null ? (
          <p class="muted small">Checking with the server…</p>
        ) : problems.length === 0 ? (
          <p class="small ok-note">The server accepts this program.</p>
        ) : (
          <ul class="problems">
            {problems.map((p) => {
              const place = places ? placeOf(places, p.path) : null
              return (
                <li key={`${p.path}|${p.message}`}>
                  {place && (
                    <>
                      <button
                        type="button"
                        class="linklike"
                        data-testid="problem-line"
                        aria-label={`Go to line ${place.line} (${p.path})`}
                        onClick={() => show(place)}
                      >
                        line {place.line}
                      </button>{' '}
                    </>
                  )}
                  <code>{p.path}</code>: {p.message}
                </li>
              )
            })}
          </ul>
        )}
      </div>
      {current !== undefined && <ProgramDiff before={current} afterText={value} />}
    </div>
  )
}

type DiffLine = { op: ' ' | '-' | '+'; text: string }

/** A line diff (longest common subsequence); programs are small, and a huge one is shown whole. */
export function lineDiff(a: string[], b: string[]): DiffLine[] {
  if (a.length * b.length > 2_000_000)
    return [
      ...a.map((text) => ({ op: '-' as const, text })),
      ...b.map((text) => ({ op: '+' as const, text })),
    ]
  const n = a.length
  const m = b.length
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0))
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      (lcs[i] as number[])[j] =
        a[i] === b[j]
          ? ((lcs[i + 1] as number[])[j + 1] as number) + 1
          : Math.max((lcs[i + 1] as number[])[j] as number, (lcs[i] as number[])[j + 1] as number)
  const out: DiffLine[] = []
  let i = 0
  let j = 0
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push({ op: ' ', text: a[i] as string })
      i++
      j++
    } else if (((lcs[i + 1] as number[])[j] as number) >= ((lcs[i] as number[])[j + 1] as number))
      out.push({ op: '-', text: a[i++] as string })
    else out.push({ op: '+', text: b[j++] as string })
  }
  while (i < n) out.push({ op: '-', text: a[i++] as string })
  while (j < m) out.push({ op: '+', text: b[j++] as string })
  return out
}

function ProgramDiff({ before, afterText }: { before: unknown; afterText: string }) {
  const parsed = parseProgram(afterText)
  if ('problem' in parsed) return null
  const a = JSON.stringify(before, null, 2).split('\n')
  const b = JSON.stringify(parsed.program, null, 2).split('\n')
  const diff = lineDiff(a, b)
  const changed = diff.filter((l) => l.op !== ' ').length
  return (
    <details class="diff" open={changed > 0}>
      <summary>
        Changes against the current version (
        {changed === 0 ? 'none' : `${changed} line${changed === 1 ? '' : 's'}`})
      </summary>
      <pre data-testid="program-diff">
        {diff.map((l, k) => (
          <span key={String(k)} class={l.op === '+' ? 'add' : l.op === '-' ? 'del' : undefined}>
            {l.op} {l.text}
            {'\n'}
          </span>
        ))}
      </pre>
    </details>
  )
}
