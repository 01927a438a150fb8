/**
 * Calendars in manifests. The manifest accepts `calendars` (names) already;
 * until this build has calendars, a non-empty list is refused here, the one
 * place to switch when calendar support lands (check the names exist then).
 */
/** False until calendars exist; then manifests may name them. */
export const CALENDARS_AVAILABLE = false

/** Problems of a manifest's `calendars`, with paths relative to the manifest. */
export function calendarProblems(names: readonly unknown[]): { path: string; message: string }[] {
  if (CALENDARS_AVAILABLE || names.length === 0) return []
  return [
    {
      path: 'calendars',
      message: 'calendars are not available yet on this server; remove the field or leave it empty',
    },
  ]
}
