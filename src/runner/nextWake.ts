/**
 * The running loop's sleep after a good tick, aimed at the soonest `wake_at`
 * ahead (a run coming due, a timer running out) when that is sooner than the
 * next tick: a run due between two ticks starts at its time, not up to
 * TICK_MS late. One index read; runs made due by someone else (an API start,
 * a resolved cue) nudge the loop instead. A failed read keeps the plain tick.
 *
 * The soonest wake-up after the instant the pass looked for due work, not
 * after now: a run that came due while the pass was busy (a slow step, a
 * loaded machine) was not seen by it, and starts at once rather than at the
 * following wake-up, up to a tick late. What the pass saw due and left (a run
 * claimed elsewhere, a key held) lies before that instant, so it cannot keep
 * the loop from sleeping.
 */
import * as runs from '../../sql/eventRuns/index.ts'
import type { ResolvedOptions } from './options.ts'

/**
 * Milliseconds to sleep, at most `tickWait`. `hint.soonest` answers the
 * soonest wake time releases reported while the read was under way
 * (runner's clock, ms); `hint.reset` is called just before the read.
 */
export async function untilNextWake(
  opts: Pick<ResolvedOptions, 'db' | 'clock' | 'logger'>,
  instance: string,
  at: { dueCheckedAt: Date | null; tickWait: number },
  hint: { reset: () => void; soonest: () => number | null },
): Promise<number> {
  const { db, clock, logger } = opts
  const { dueCheckedAt, tickWait } = at
  if (tickWait <= 0) return 0
  try {
    const now = clock.now()
    // Releases written from here on are told to the hint; those before are in the read.
    hint.reset()
    const read = await runs.nextWakeAfter(db, dueCheckedAt ?? now)
    const next = Math.min(
      read?.getTime() ?? Number.POSITIVE_INFINITY,
      hint.soonest() ?? Number.POSITIVE_INFINITY,
    )
    if (next === Number.POSITIVE_INFINITY) return tickWait
    // +1 ms: a timer can fire a little early, and the due query is `wake_at <= now`.
    const until = next - clock.now().getTime() + 1
    return Math.max(0, Math.min(tickWait, until))
  } catch (err) {
    logger.warn({ err, instance }, 'could not read the next wake-up time; sleeping a whole tick')
    return tickWait
  }
}
