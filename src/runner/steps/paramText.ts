/**
 * Reading the steps' params the one way, for the runner and the console
 * alike (the console bundles this file; it imports nothing, so it runs in a
 * browser as it does in Node): a `core.wait`'s `until` offset and a
 * `core.cue`'s prompt.
 */

const UNIT_SECONDS = { s: 1, m: 60, h: 3600, d: 86_400 } as const
const OFFSET = /^\+?(\d{1,10})([smhd])$/

/** Seconds of an `until` offset such as "+15m" (units s, m, h, d; the `+` optional), or null when it is not one. */
export function parseOffset(text: string): number | null {
  const m = OFFSET.exec(text.trim())
  if (!m) return null
  return Number(m[1]) * UNIT_SECONDS[m[2] as keyof typeof UNIT_SECONDS]
}

/** A cue step's prompt, from its params (as stored, before templates are rendered), or null when it has none. */
export function cuePrompt(params: unknown): string | null {
  if (params && typeof params === 'object' && 'prompt' in params) {
    const p = (params as { prompt: unknown }).prompt
    if (typeof p === 'string') return p
  }
  return null
}

/** A cue step's prompt for a person to read: `(no prompt)` when it has none. */
export function promptOf(params: unknown): string {
  return cuePrompt(params) ?? '(no prompt)'
}
