/**
 * The grace rule, in one place for the start paths that decide in code: a run
 * may start while `scheduled_for + graceSeconds` has not passed, unless its
 * grace window does not apply at all (a backfilled run, or an occurrence held
 * back by BUFFER_ONE until the run before it ends), which starts however late.
 * The SQL side of the same rule is in `sql/eventRuns/claims.ts` (the claim's
 * guard and the missed sweep).
 */
export function withinGrace(
  run: { scheduledFor: Date; graceExempt: boolean },
  graceSeconds: number,
  now: Date,
): boolean {
  return run.graceExempt || run.scheduledFor.getTime() + graceSeconds * 1000 >= now.getTime()
}
