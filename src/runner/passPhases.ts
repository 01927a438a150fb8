/**
 * Where a runner pass spent its time, phase by phase, and the warning when a
 * pass (or the wait for a free flight before it) outlasts a tick.
 *
 * Why: a pass that takes longer than a tick makes every run due meanwhile
 * late, and `tickDuration` alone says only *that* it was slow. The warning
 * names the phase (the start transaction, the lease claim, a sweep, the
 * heartbeat…) so a stall seen once, under load, can be traced to a statement
 * or a lock afterwards. Warnings are at most one per {@link SLOW_PASS_WARN_EVERY_MS}
 * (a loaded show can make every pass slow), each counting the slow passes
 * since the last.
 */
import type { RunnerLogger } from './options.ts'

/** The least time between two slow-pass warnings of one runner. */
export const SLOW_PASS_WARN_EVERY_MS = 60_000

/** One pass's phases: each mark ends the phase that began at the mark before it. */
export class PassPhases {
  private readonly began = performance.now()
  private last = this.began
  /** Milliseconds per phase, in the order they ended (a phase marked twice adds up). */
  readonly phases: Record<string, number> = {}

  /** The phase called `name` ends now. */
  mark(name: string): void {
    const now = performance.now()
    this.phases[name] = Math.round((this.phases[name] ?? 0) + now - this.last)
    this.last = now
  }

  /** Milliseconds since the pass began. */
  get elapsedMs(): number {
    return Math.round(performance.now() - this.began)
  }
}

/** Warns of passes slower than a tick, at most once a {@link SLOW_PASS_WARN_EVERY_MS}. */
export class SlowPassWarning {
  private lastWarnedAt = Number.NEGATIVE_INFINITY
  private slowSinceWarning = 0

  constructor(
    private readonly opts: { tickMs: number; logger: RunnerLogger; instanceId: string },
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * A pass ended: `waitedForFlightMs` is how long the loop waited for a free
   * flight before it, `pass` its phases. Nothing unless the two outlast a tick.
   */
  passEnded(waitedForFlightMs: number, pass: PassPhases): void {
    const totalMs = Math.round(waitedForFlightMs) + pass.elapsedMs
    if (totalMs <= this.opts.tickMs) return
    this.slowSinceWarning++
    const at = this.now()
    if (at - this.lastWarnedAt < SLOW_PASS_WARN_EVERY_MS) return
    this.opts.logger.warn(
      {
        instance: this.opts.instanceId,
        tickMs: this.opts.tickMs,
        totalMs,
        waitedForFlightMs: Math.round(waitedForFlightMs),
        phasesMs: { ...pass.phases },
        slowPasses: this.slowSinceWarning,
      },
      'a runner pass outlasted a tick, so runs due meanwhile start late; phasesMs says where the time went',
    )
    this.lastWarnedAt = at
    this.slowSinceWarning = 0
  }
}
