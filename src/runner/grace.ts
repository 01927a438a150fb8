/**
 * The grace rule, in one place for the start paths that decide in code. A
 * run's `missed_at` is the instant its grace window closes (its scheduled
 * instant plus its definition's grace, stamped when the run is made and
 * re-stamped when the grace changes); it is NULL for a run whose grace window
 * does not apply (a backfilled run, or an occurrence held back by BUFFER_ONE
 * until the run before it ends), which starts however late. The SQL side of
 * the same rule compares the same column (the start claim's guard in
 * `sql/eventRuns/claimStart.ts`, the missed sweep in `sql/eventRuns/due.ts`),
 * so all three agree at the boundary.
 */
export function withinGrace(run: { missedAt: Date | null }, now: Date): boolean {
  return run.missedAt === null || run.missedAt.getTime() >= now.getTime()
}
