/**
 * What only admins may read: the literal header values of `core.webhook` steps
 * (an `Authorization: Bearer …` written into a program). Viewers and operators
 * see each value as {@link REDACTED}, in `EventVersion.program` and in
 * `RunStep.params`; header names, URLs and bodies stay readable. Secrets named
 * as `{{secret.NAME}}` are never in a program at all; this covers what an
 * author typed in literally.
 */
import { roleAllows } from '../auth.ts'
import type { ApiContext } from './context.ts'

export const REDACTED = '[redacted]'

/** Step kinds whose `params.headers` values are redacted. */
const HEADER_KINDS = new Set(['core.webhook'])

/** True when the caller may read literal header values (admins). */
export function seesLiterals(ctx: ApiContext): boolean {
  return ctx.principal !== null && roleAllows(ctx.principal.role, 'admin')
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

/** A step's params with header values redacted (other kinds, and params without headers, as they are). */
export function redactStepParams(kind: unknown, params: unknown): unknown {
  if (typeof kind !== 'string' || !HEADER_KINDS.has(kind) || !isObject(params)) return params
  if (!isObject(params.headers)) return params
  const headers: Record<string, unknown> = {}
  for (const name of Object.keys(params.headers)) headers[name] = REDACTED
  return { ...params, headers }
}

/** A program (`{phases: [{steps: [...]}]}`) with every webhook step's header values redacted. */
export function redactProgram(program: unknown): unknown {
  if (!isObject(program) || !Array.isArray(program.phases)) return program
  return {
    ...program,
    phases: program.phases.map((phase) => {
      if (!isObject(phase) || !Array.isArray(phase.steps)) return phase
      return {
        ...phase,
        steps: phase.steps.map((step) =>
          isObject(step) ? { ...step, params: redactStepParams(step.kind, step.params) } : step,
        ),
      }
    }),
  }
}

/**
 * What only operators and admins may read: what a webhook's receiver answered.
 * A receiver may echo a request back transformed (reversed, upper-cased,
 * base64), which no scrubbing can recognise (docs/secrets.md), so viewers get
 * the status and the size of a webhook step's `result` without its body, and
 * every "answered HTTP 400: …" quote of a body in `lastError` and log lines
 * without the quote.
 */
export const BODY_WITHHELD = '[response body: operators and admins only]'

/** True when the caller may read webhook response bodies (operators and admins). */
export function seesResponseBodies(ctx: ApiContext): boolean {
  return ctx.principal !== null && roleAllows(ctx.principal.role, 'operator')
}

/** A webhook step's result without its body: `{status, bodyBytes, body: BODY_WITHHELD}`. */
export function withheldWebhookResult(kind: unknown, result: unknown): unknown {
  if (kind !== 'core.webhook' || !isObject(result) || typeof result.body !== 'string') return result
  return { ...result, body: BODY_WITHHELD, bodyBytes: Buffer.byteLength(result.body) }
}

/**
 * The quote of a response body after "answered HTTP NNN: ", up to the
 * runner's "; retrying at <time>" when the text ends with one, else to the end.
 */
const BODY_QUOTE = /(answered HTTP \d{3}): .*?(?=; retrying at \d{4}-\d\d-\d\dT[\d:.]+Z$|$)/s

/** `text` with a quoted response body replaced by {@link BODY_WITHHELD}. */
export function withheldResponseQuote(text: string | null): string | null {
  if (text === null || !text.includes('answered HTTP ')) return text
  return text.replace(BODY_QUOTE, `$1: ${BODY_WITHHELD}`)
}

/**
 * Header values that read `[redacted]` in manifests about to be applied: an
 * export made with a viewer's or operator's token, which would replace the real
 * values with the placeholder. Each with its path (`[0].program.phases[0].steps[1].params.headers.authorization`).
 */
export function redactedHeaderProblems(manifests: unknown): { path: string; message: string }[] {
  const problems: { path: string; message: string }[] = []
  if (!Array.isArray(manifests)) return problems
  manifests.forEach((m: unknown, i) => {
    if (!isObject(m) || !isObject(m.program) || !Array.isArray(m.program.phases)) return
    m.program.phases.forEach((phase: unknown, p) => {
      if (!isObject(phase) || !Array.isArray(phase.steps)) return
      phase.steps.forEach((step: unknown, s) => {
        if (!isObject(step) || typeof step.kind !== 'string' || !HEADER_KINDS.has(step.kind)) return
        const headers = isObject(step.params) && isObject(step.params.headers) ? step.params.headers : {}
        for (const [name, value] of Object.entries(headers))
          if (value === REDACTED)
            problems.push({
              path: `[${i}].program.phases[${p}].steps[${s}].params.headers[${JSON.stringify(name)}]`,
              message: `is "${REDACTED}": this file was exported without an admin token; put the real value (or a {{secret.NAME}}) back`,
            })
      })
    })
  })
  return problems
}
