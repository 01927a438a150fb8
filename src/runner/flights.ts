/**
 * Batches in flight: the advances a running runner's passes launched and did
 * not wait for. A pass claims what is due, hands the batch to a flight and is
 * done, so the next pass (a resolved cue's nudge, a timer's `wake_at`, the
 * next tick) claims and advances what came due meanwhile instead of waiting
 * behind the whole batch: a round of slow webhooks for a thousand runs no
 * longer holds back a GO or a 2-second wait.
 *
 * Nothing is advanced twice: a flight holds its runs' claims (held.ts) until
 * each is answered, and a live claim is not re-enterable, not even by its
 * owner (`claimTickBatch`). At most `limit` flights at once; a pass waits for
 * a free slot before it claims, so a backlog cannot pile up batches without
 * bound. A flight that fails is logged and counted like a failed tick; its
 * claims are given back by its own `finally`.
 */
import { isDbUnavailable } from '../../sql/db.ts'
import type { ResolvedOptions } from './options.ts'

export class Flights {
  private readonly flying = new Set<Promise<void>>()

  constructor(
    private readonly limit: number,
    private readonly failed: (err: unknown) => void,
    private readonly settled: () => void = () => {},
  ) {}

  /** Batches advancing now. */
  get size(): number {
    return this.flying.size
  }

  /** Let `advance` go on in the background; it settles on its own. */
  launch(advance: Promise<void>): void {
    const flight: Promise<void> = advance
      .then(
        () => void this.flying.delete(flight),
        (err: unknown) => {
          this.flying.delete(flight)
          this.failed(err)
        },
      )
      .finally(() => this.settled())
    this.flying.add(flight)
  }

  /** Resolves once fewer than `limit` batches are in flight. */
  async slot(): Promise<void> {
    while (this.flying.size >= this.limit) await Promise.race(this.flying)
  }

  /** Resolves once every batch in flight has settled (a stopping runner). */
  async settle(): Promise<void> {
    while (this.flying.size > 0) await Promise.all(this.flying)
  }
}

/** Wait for every advance of a pass (each taken as `{ err }` or null); rejects with the first failure once all have settled. */
export async function settleAll(advances: Promise<{ err: unknown } | null>[]): Promise<void> {
  const failed = (await Promise.all(advances)).find((r) => r !== null)
  if (failed) throw failed.err
}

/** The runner's batches in flight (a pass's, the wake lane's): a failed one is counted and logged like a failed tick. */
export function loggedFlights(
  limit: number,
  opts: Pick<ResolvedOptions, 'logger' | 'observer'>,
  instance: string,
  message: string,
): Flights {
  return new Flights(
    limit,
    (err) => {
      opts.observer?.tickError?.()
      opts.logger.error({ err, instance, databaseUnavailable: isDbUnavailable(err) }, message)
    },
    () => opts.observer?.batchAdvanced?.(),
  )
}
