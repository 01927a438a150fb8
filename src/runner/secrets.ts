/**
 * Webhook secrets: a program names a secret as `{{secret.NAME}}`, and the value
 * comes from the environment variable `SHOWRUNNER_SECRET_NAME` of the runner
 * that executes the step, at the moment it executes. So the value is never in
 * a program, a step's stored params, or anything else in the database.
 *
 * The step that resolves secrets also scrubs them: every resolved value (raw,
 * URL-encoded or JSON-escaped, as a receiver or an error might echo it) is
 * replaced by `[secret.NAME]` in the step's error text and result before
 * either is stored, so a value cannot reach a log line, `lastError`, a result
 * or an API answer through an error message or a receiver's echo.
 */
import { StepFailure } from './steps/types.ts'

/** Environment variables holding secrets are named this plus the secret's name. */
export const SECRET_ENV_PREFIX = 'SHOWRUNNER_SECRET_'

/** A secret's name: upper-case letters, digits and `_`, starting with a letter. */
export const SECRET_NAME = /^[A-Z][A-Z0-9_]{0,63}$/

/** `{{secret.NAME}}` (whitespace inside the braces allowed), capturing what follows `secret.`. */
const SECRET_REF = /\{\{\s*secret\.([^{}]*?)\s*\}\}/g

/** A fresh copy of the pattern {@link SecretScope.resolve} resolves (global, so each caller gets its own state). */
export function secretReferencePattern(): RegExp {
  return new RegExp(SECRET_REF.source, 'g')
}

/** The environment secrets are read from. */
export type SecretSource = Readonly<Record<string, string | undefined>>

/**
 * The secrets one step attempt resolved, for resolving its params and scrubbing
 * what it answers. Make one per attempt.
 */
export class SecretScope {
  private readonly resolved = new Map<string, string>()

  constructor(private readonly source: SecretSource = process.env) {}

  /**
   * Every string inside `value` with its `{{secret.NAME}}` references replaced
   * by their values. An unknown or badly named secret fails the step (not
   * retryable: the environment will not change under a running process); the
   * message names the variable, never a value.
   */
  resolve<T>(value: T): T {
    return this.walk(value) as T
  }

  private walk(value: unknown): unknown {
    if (typeof value === 'string') return this.resolveString(value)
    if (Array.isArray(value)) return value.map((item) => this.walk(item))
    if (value !== null && typeof value === 'object') {
      const out: Record<string, unknown> = {}
      for (const [key, item] of Object.entries(value)) out[key] = this.walk(item)
      return out
    }
    return value
  }

  private resolveString(text: string): string {
    if (!text.includes('{{')) return text
    return text.replace(SECRET_REF, (_match, name: string) => {
      if (!SECRET_NAME.test(name)) {
        throw new StepFailure(
          `secret name ${JSON.stringify(name.slice(0, 64))} is not valid: use A-Z, 0-9 and _, starting with a letter`,
          { retryable: false },
        )
      }
      const secret = this.source[`${SECRET_ENV_PREFIX}${name}`]
      if (secret === undefined || secret === '') {
        throw new StepFailure(
          `secret ${name} is not set: set the environment variable ${SECRET_ENV_PREFIX}${name} on every runner instance`,
          { retryable: false },
        )
      }
      this.resolved.set(name, secret)
      return secret
    })
  }

  /** `text` with every form of every resolved value replaced by `[secret.NAME]`. */
  scrub(text: string): string {
    if (this.resolved.size === 0) return text
    let out = text
    for (const [form, name] of this.forms()) out = out.split(form).join(`[secret.${name}]`)
    return out
  }

  /**
   * `text` scrubbed, then cut to `maxChars` characters, in that order: cutting
   * first would leave the start of a value that straddles the cut. What is left
   * at the end that could be the start of a value (text cut here, or by
   * whoever read it: `alreadyCut`) is dropped too, so no prefix of a secret
   * survives, however the padding before it was chosen. A cut text ends in `ellipsis`.
   */
  scrubAndCut(text: string, maxChars: number, alreadyCut = false, ellipsis = ''): string {
    const scrubbed = this.scrub(text)
    if (scrubbed.length <= maxChars && !alreadyCut) return scrubbed
    return `${this.withoutPartialTail(scrubbed.slice(0, maxChars))}${ellipsis}`
  }

  /**
   * `text` with the start of a resolved value dropped wherever a part of the
   * text was cut short and marked so with `…` (a URL shown at 200 characters,
   * say): the whole value is scrubbed, the start that survived a cut is not.
   */
  private withoutPartialsAtCuts(text: string): string {
    if (this.resolved.size === 0 || !text.includes('…')) return text
    const parts = text.split('…')
    return parts.map((part, i) => (i < parts.length - 1 ? this.withoutPartialTail(part) : part)).join('…')
  }

  /** `text` without a tail that is the start of any form of a resolved value. */
  private withoutPartialTail(text: string): string {
    let cut = text.length
    for (const [form] of this.forms()) {
      for (let k = Math.min(form.length - 1, text.length); k > 0; k--) {
        if (text.length - k < cut && text.endsWith(form.slice(0, k))) {
          cut = text.length - k
          break
        }
      }
    }
    return text.slice(0, cut)
  }

  /** Every form of every resolved value, longest first. */
  private forms(): [form: string, name: string][] {
    const forms: [form: string, name: string][] = []
    for (const [name, value] of this.resolved) {
      const variants = new Set([
        value,
        encodeURIComponent(value),
        encodeURI(value),
        JSON.stringify(value).slice(1, -1),
      ])
      try {
        // How the URL parser spells it in a query or a path.
        variants.add(new URL(`http://x/${value}`).pathname.slice(1))
        variants.add(new URL(`http://x/?${value}`).search.slice(1))
      } catch {
        // Not URL-shaped; the other forms stand.
      }
      for (const form of variants) if (form !== '') forms.push([form, name])
    }
    // Longest first, so a value that contains another is replaced whole.
    forms.sort((a, b) => b[0].length - a[0].length)
    return forms
  }

  /** {@link scrub} applied to every string inside `value` (keys included). */
  scrubValue<T>(value: T): T {
    if (this.resolved.size === 0) return value
    const walk = (v: unknown): unknown => {
      if (typeof v === 'string') return this.scrub(v)
      if (Array.isArray(v)) return v.map(walk)
      if (v !== null && typeof v === 'object') {
        const out: Record<string, unknown> = {}
        for (const [key, item] of Object.entries(v)) out[this.scrub(key)] = walk(item)
        return out
      }
      return v
    }
    return walk(value) as T
  }

  /**
   * A failure safe to store: the message scrubbed, retryability kept, and no
   * `cause` (a driver's error could quote a header or the URL).
   */
  scrubError(err: unknown): StepFailure {
    const message = err instanceof Error ? err.message || err.name : String(err)
    const retryable = err instanceof StepFailure ? err.retryable : true
    return new StepFailure(this.withoutPartialsAtCuts(this.scrub(message)), { retryable })
  }
}
