/** Aligned plain-text tables for people (scripts use --json). */

/** Columns padded to their widest cell; the last column is not padded. */
export function table(headers: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : String(c))))]
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)))
  return cells
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')
}

/** "3 min ago", "in 2 h": how far `iso` is from now. */
export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-'
  const ms = now - Date.parse(iso)
  const s = Math.round(Math.abs(ms) / 1000)
  const text = s < 90 ? `${s} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${Math.round(s / 3600)} h`
  return ms >= 0 ? `${text} ago` : `in ${text}`
}
