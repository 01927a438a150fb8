/**
 * A pass's hand-off advanced as chunks side by side, sharing its step places
 * (the earliest-due chunk served first), rather than as one batch.
 *
 * Why: a batch moves in lock-step rounds (advance.ts), so none of its runs
 * begins its next step before the slowest of the round has ended this one.
 * Two thousand shows due at one instant were handed on as one batch: each
 * called a webhook (`RUNNER_PARALLELISM`, then 16, at a time), then parked a
 * cue.
 * The first webhook answered 1.1 s after the instant, the last 5.3 s after
 * it, and every cue parked at 5.4 s, its person's wait added to every show.
 *
 * As chunks, each is a batch of its own, all begun at once; their steps wait
 * for the hand-off's `RUNNER_PARALLELISM` places, the earliest-due chunk's
 * first (executor/slots.ts), so the first chunk's calls go out first and it
 * moves on to its cues while later chunks still call out. The places are as
 * many as the one batch had, so as many calls are in flight as before. A chunk's
 * round is a few statements, as a batch's is: chunks of
 * {@link chunkSizeFor} runs cost a few hundredths of a statement per run and
 * round more than one batch did.
 */
import { advanceBatch, type OnAnswer } from './advance.ts'
import { StepSlots } from './executor/slots.ts'
import { type ClaimedRun, DEFAULT_STEP_CONCURRENCY, type EngineDeps } from './types.ts'

/**
 * Runs per chunk: eight rounds of parallel steps (256 runs with
 * `RUNNER_PARALLELISM` 32, the default), so the first chunk's calls are
 * done after a few of the receiver's answer times, not a hundred.
 */
function chunkSizeFor(parallelism: number): number {
  return Math.max(1, parallelism) * 8
}

/**
 * Advance `ready` (held by this instance, in due order) as chunks of `size`
 * (by default {@link chunkSizeFor} `places`, the batch's parallelism), side by
 * side, sharing `places` places.
 * Resolves once every chunk is done; rejects, once every chunk has settled,
 * with the first failure (a statement a chunk's batch shares), that chunk's
 * unanswered runs let go as advanceBatch lets them go.
 */
export async function advanceInChunks(
  deps: EngineDeps,
  ready: readonly ClaimedRun[],
  onAnswer: OnAnswer,
  places = deps.stepConcurrency ?? DEFAULT_STEP_CONCURRENCY,
  size = chunkSizeFor(places),
): Promise<void> {
  if (ready.length <= size) return advanceBatch(deps, ready, onAnswer)
  const slots = new StepSlots(places)
  const chunks: Promise<void>[] = []
  for (let i = 0; i < ready.length; i += size) {
    const lane = slots.lane(i / size)
    chunks.push(advanceBatch({ ...deps, stepSlots: lane }, ready.slice(i, i + size), onAnswer))
  }
  const settled = await Promise.allSettled(chunks)
  const failed = settled.find((s) => s.status === 'rejected')
  if (failed) throw failed.reason
}
