/**
 * Admission of GraphQL work per instance: at most `maxInFlight` requests are
 * worked on at once (body read, credential checked, document parsed,
 * validated, executed, answer serialised), at most `maxQueued` more wait their
 * turn in arrival order, and the next one is answered at once with `BUSY`
 * (HTTP 503, `Retry-After`) from a body built once, before any of that work.
 *
 * Why: every request the loop takes on interleaves its work with every other
 * one's, so 2,000 at once made each event-loop turn long and `/healthz`, on
 * the same loop, waited behind them (p99 0.6–0.9 s, one of 5 s); the pool's
 * own BUSY came only after each had been parsed, authenticated and executed
 * as far as its first statement. Bounding the requests in flight bounds the
 * work in any one turn; a refusal here costs one small write.
 *
 * A WebSocket's queries and mutations take the same slots once parsed and
 * validated ({@link admitOperation}); a refusal is a BUSY result there.
 *
 * A request holds its slot until its answer starts (the status line is
 * written) or its work settles, whichever is first: a streamed answer
 * (Server-Sent Events) gives its slot back once its stream opens, so
 * subscriptions are bounded by their own caps, not by this. A request waits
 * in the queue at most `maxWaitMs`, then is answered BUSY too; one whose
 * client went away leaves the queue.
 *
 * Each refusal's `Retry-After` is drawn at random from 1 to the seconds the
 * instance needs to work through what it refused lately ({@link
 * Admission.retryAfterSeconds}): 4,000 clients refused at one instant and all
 * told "1" come back together, so each second admits about one queue's worth
 * and refuses the rest again, while the seconds between stand idle.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { ERROR_CODES } from '../errors.ts'

export const ADMISSION_BUSY_MESSAGE =
  'The server is busy: too many requests at once. Retry in a moment, or send fewer at once.'

export interface AdmissionOptions {
  /** Requests worked on at once (GRAPHQL_MAX_IN_FLIGHT). */
  maxInFlight: number
  /** Requests that may wait for a slot (GRAPHQL_MAX_QUEUED); 0 refuses at once when every slot is taken. */
  maxQueued: number
  /** Longest a request waits in the queue before it is answered BUSY. @default 10000 */
  maxWaitMs?: number
  /** Told of each refusal (for a sampled log line); `queued` says it waited and timed out. */
  onRefused?: (why: 'full' | 'waited') => void
}

/** Counts since the admission was made, and what is held now. */
export interface AdmissionStats {
  inFlight: number
  queued: number
  /** Requests that got a slot (at once or after waiting). */
  admitted: number
  /** Of those, how many waited in the queue first. */
  waited: number
  /** Answered BUSY: the queue was full. */
  refusedFull: number
  /** Answered BUSY: waited `maxWaitMs` without a slot. */
  refusedWaited: number
  /** Left the queue because the client closed the connection. */
  abandoned: number
  /** The most in flight at once so far. */
  peakInFlight: number
}

/** The longest `Retry-After` a refusal is given, however many were refused: a client is not sent away for long. */
export const MAX_RETRY_AFTER_SECONDS = 10
/** The span the recent refusals and completions are counted over (two buckets of a second). */
const RATE_BUCKET_MS = 1000

/** A release that does something only the first time it is called. */
export type Release = () => void

interface Waiter {
  run: (release: Release) => void
  refuse: () => void
  since: number
  gone: boolean
}

/**
 * The counting part, with no HTTP in it: `enter` runs `run` now or later with
 * a release to call when the work is done, or calls `refuse` (now, or when the
 * wait ran out). Each release frees its slot once, however often it is called.
 */
export class Admission {
  private inFlight = 0
  private readonly queue: Waiter[] = []
  private head = 0
  private timer: NodeJS.Timeout | null = null
  private readonly counts = {
    admitted: 0,
    waited: 0,
    refusedFull: 0,
    refusedWaited: 0,
    abandoned: 0,
    peakInFlight: 0,
  }
  /** Refusals and completions in this second's bucket and the one before (retryAfterSeconds). */
  private bucketStart = 0
  private recent = { refused: 0, released: 0 }
  private earlier = { refused: 0, released: 0 }
  readonly maxInFlight: number
  readonly maxQueued: number
  readonly maxWaitMs: number

  constructor(
    private readonly opts: AdmissionOptions,
    private readonly now: () => number = Date.now,
    private readonly random: () => number = Math.random,
  ) {
    this.maxInFlight = Math.max(1, opts.maxInFlight)
    this.maxQueued = Math.max(0, opts.maxQueued)
    this.maxWaitMs = opts.maxWaitMs ?? 10_000
  }

  stats(): AdmissionStats {
    return { inFlight: this.inFlight, queued: this.queue.length - this.head, ...this.counts }
  }

  /**
   * The `Retry-After` for a refusal now: a whole number of seconds drawn
   * evenly from 1 to the spread, the refusals of the last second or two
   * divided by what the instance gets through in a second (the completions
   * counted over the same span, and never less than one slot-and-queue's
   * worth), at most {@link MAX_RETRY_AFTER_SECONDS}. A lone refusal gets 1; a
   * storm of them is spread over the seconds it takes to serve, so the
   * clients that wait as told arrive about as fast as they can be taken.
   */
  retryAfterSeconds(): number {
    this.roll()
    const refused = this.recent.refused + this.earlier.refused
    const perSecond = Math.max(
      (this.recent.released + this.earlier.released) / 2,
      this.maxInFlight + this.maxQueued,
    )
    const spread = Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(1, Math.ceil(refused / perSecond)))
    return 1 + Math.min(spread - 1, Math.floor(this.random() * spread))
  }

  /** Move the rate buckets on to the current second. */
  private roll(): void {
    const t = this.now()
    const age = t - this.bucketStart
    if (age < RATE_BUCKET_MS) return
    this.earlier = age < 2 * RATE_BUCKET_MS ? this.recent : { refused: 0, released: 0 }
    this.recent = { refused: 0, released: 0 }
    this.bucketStart = t
  }

  private countRefusal(): void {
    this.roll()
    this.recent.refused++
  }

  /**
   * Run `run` with a slot now, queue it, or refuse it. Answers a function that
   * takes it out of the queue if it is still waiting (its client went away).
   */
  enter(run: (release: Release) => void, refuse: () => void): () => void {
    if (this.inFlight < this.maxInFlight && this.queue.length === this.head) {
      this.start(run, false)
      return () => {}
    }
    if (this.queue.length - this.head >= this.maxQueued) {
      this.counts.refusedFull++
      this.countRefusal()
      this.opts.onRefused?.('full')
      refuse()
      return () => {}
    }
    const w: Waiter = { run, refuse, since: this.now(), gone: false }
    this.queue.push(w)
    this.armTimer()
    return () => {
      if (w.gone) return
      w.gone = true
      this.counts.abandoned++
      this.compact()
    }
  }

  private start(run: (release: Release) => void, waited: boolean): void {
    this.inFlight++
    this.counts.admitted++
    if (waited) this.counts.waited++
    if (this.inFlight > this.counts.peakInFlight) this.counts.peakInFlight = this.inFlight
    let released = false
    const release = () => {
      if (released) return
      released = true
      this.inFlight--
      this.roll()
      this.recent.released++
      this.next()
    }
    try {
      run(release)
    } catch (err) {
      release()
      throw err
    }
  }

  /** Give free slots to the oldest waiters still there. */
  private next(): void {
    while (this.inFlight < this.maxInFlight && this.head < this.queue.length) {
      const w = this.queue[this.head++] as Waiter
      if (w.gone) continue
      w.gone = true
      this.start(w.run, true)
    }
    this.compact()
  }

  /** Drop the taken and abandoned waiters off the front; stop the timer when none wait. */
  private compact(): void {
    while (this.head < this.queue.length && (this.queue[this.head] as Waiter).gone) this.head++
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head)
      this.head = 0
    }
    if (this.head === this.queue.length) {
      this.queue.length = 0
      this.head = 0
      if (this.timer) clearTimeout(this.timer)
      this.timer = null
    }
  }

  /** Refuse the waiters that have waited `maxWaitMs`, then wake again for the next oldest. */
  private armTimer(): void {
    if (this.timer || this.head === this.queue.length) return
    const oldest = this.queue[this.head] as Waiter
    const due = Math.max(1, oldest.since + this.maxWaitMs - this.now())
    this.timer = setTimeout(() => {
      this.timer = null
      const t = this.now()
      while (this.head < this.queue.length) {
        const w = this.queue[this.head] as Waiter
        if (!w.gone && t - w.since < this.maxWaitMs) break
        this.head++
        if (w.gone) continue
        w.gone = true
        this.counts.refusedWaited++
        this.countRefusal()
        this.opts.onRefused?.('waited')
        w.refuse()
      }
      this.compact()
      this.armTimer()
    }, due)
    this.timer.unref()
  }

  /** Refuse every waiter (the server is stopping). */
  close(): void {
    while (this.head < this.queue.length) {
      const w = this.queue[this.head++] as Waiter
      if (w.gone) continue
      w.gone = true
      w.refuse()
    }
    this.compact()
  }
}

const BUSY_BODY = JSON.stringify({
  errors: [{ message: ADMISSION_BUSY_MESSAGE, extensions: { code: ERROR_CODES.BUSY } }],
})

/** The BUSY answer, in the media type the client asked for (GraphQL over HTTP), built from a constant. */
export function sendBusy(req: IncomingMessage, res: ServerResponse, retryAfterSeconds: number): void {
  if (res.headersSent || res.destroyed) return
  const graphqlJson = (req.headers.accept ?? '').includes('application/graphql-response+json')
  res.writeHead(503, {
    'content-type': `${graphqlJson ? 'application/graphql-response+json' : 'application/json'}; charset=utf-8`,
    'content-length': Buffer.byteLength(BUSY_BODY),
    'retry-after': String(retryAfterSeconds),
    'cache-control': 'no-store',
    // Like every GraphQL answer (yoga's CORS: any origin, no credentials), so a browser client can read it.
    'access-control-allow-origin': '*',
  })
  res.end(BUSY_BODY)
}

/**
 * After a BUSY, the refused connection's next request is not read for `ms`
 * (its Retry-After): the client's request waits in the kernel's socket
 * buffer, not in a turn of our loop.
 *
 * Why: a client that asks again at once, 2,000 of them, made every turn of the
 * loop read and refuse hundreds of requests (turns of 100-200 ms), so
 * `/healthz`, and every new connection (node accepts one per turn), waited
 * behind them. Other connections, probes and admitted requests are not held.
 *
 * The request's body is read first: node's server would otherwise read it
 * after the answer, and that read starts the socket again. A client that
 * waits its Retry-After, as asked, is never held up by this.
 */
export function holdRefusedConnection(req: IncomingMessage, ms: number): void {
  const socket = req.socket
  if (ms <= 0 || socket.destroyed) return
  const hold = () => {
    if (socket.destroyed) return
    socket.pause()
    const timer = setTimeout(() => {
      socket.off('close', forget)
      if (!socket.destroyed) socket.resume()
    }, ms)
    timer.unref()
    const forget = () => clearTimeout(timer)
    socket.once('close', forget)
  }
  // Held once the body is read ('end' comes after the read that restarts the socket).
  req.once('end', hold)
  req.resume()
}

/**
 * Hand `req` to `handle` when `admission` lets it in, else answer BUSY. The
 * slot is given back when the answer's status line is written (for a stream,
 * when it opens) or `handle`'s work settles, whichever is first; not when the
 * client goes away, since the work it started goes on (a client that sends
 * and hangs up at once would otherwise get any number of them worked on).
 * `handle` starts in a microtask of its own, never inside the answer that
 * gave it its slot.
 */
export function admitHttp(
  admission: Admission,
  req: IncomingMessage,
  res: ServerResponse,
  handle: () => Promise<unknown>,
): void {
  const leave = admission.enter(
    (release) => {
      const writeHead = res.writeHead
      // Node writes every status line through writeHead (an implicit header too).
      res.writeHead = function (this: ServerResponse, ...args: Parameters<typeof writeHead>) {
        release()
        res.writeHead = writeHead
        return writeHead.apply(this, args)
      } as typeof writeHead
      Promise.resolve()
        .then(handle)
        .finally(release)
        .catch(() => {})
    },
    () => {
      const seconds = admission.retryAfterSeconds()
      sendBusy(req, res, seconds)
      holdRefusedConnection(req, seconds * 1000)
    },
  )
  res.once('close', leave)
}

/**
 * Run `work` when `admission` lets it in, else answer `busy` with the
 * refusal's Retry-After: the WebSocket path's queries and mutations, which
 * share the instance's slots with HTTP's (a socket's hundred operations
 * would otherwise all be worked on at once, beside the slots). The slot is
 * given back when the work settles. `leave` takes a waiting operation out
 * of the queue (its socket closed); it then answers `busy` for nobody.
 */
export function admitOperation<T>(
  admission: Admission,
  work: () => T | Promise<T>,
  busy: (retryAfterSeconds: number) => T,
): { answer: Promise<T>; leave: () => void } {
  let leave: () => void = () => {}
  const answer = new Promise<T>((resolve, reject) => {
    const left = admission.enter(
      (release) => {
        Promise.resolve().then(work).then(resolve, reject).finally(release)
      },
      () => resolve(busy(admission.retryAfterSeconds())),
    )
    leave = () => {
      left()
      resolve(busy(0))
    }
  })
  return { answer, leave }
}
