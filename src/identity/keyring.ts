/**
 * API keys at run time: making a secret, recognising one, and keeping every
 * instance's answer in step with the database.
 *
 * A key is looked up by the SHA-256 of its secret and then cached by that
 * digest, so a busy client costs no query per request. What makes the cache
 * safe is the poll: while this instance holds any key, it asks every
 * `pollMs` (STATUS_POLL_MS) which of them were revoked, expired or deleted, in
 * one statement, and forgets those. So a key revoked through any instance is
 * refused here within one interval, and whatever it holds open (a WebSocket,
 * an SSE stream) is told through {@link ApiKeyring.onRefused} and ends.
 * Expiry needs no poll: each cached key carries its `expiresAt`.
 *
 * The same poll writes `lastUsedAt` for the keys used since, at most once per
 * {@link LAST_USED_RESOLUTION_MS} per key, so use is recorded without a write
 * per request.
 */
import { createHash, randomBytes } from 'node:crypto'
import * as apiKeys from '../../sql/apiKeys.ts'
import type { Queryable } from '../../sql/db.ts'
import { isRole, type Principal } from '../auth.ts'
import type { Logger } from '../log.ts'

/** Every secret starts with this, so a leaked one is recognisable (secret scanners, a person reading a log). */
export const KEY_PREFIX = 'sr_live_'
/** Characters of the secret kept and shown as the key's `prefix`: `sr_live_` and four of the random part. */
export const SHOWN_PREFIX_LENGTH = KEY_PREFIX.length + 4
/** lastUsedAt is kept to this resolution: a key used all day costs one write a minute. */
export const LAST_USED_RESOLUTION_MS = 60_000
/** A cached key nobody used for this long is dropped, so an idle instance stops polling. */
const IDLE_EVICT_MS = 10 * 60_000
/** Dead keys remembered per instance (32 bytes of hex each: about 1 MB at the bound). */
const MAX_DEAD = 10_000

/** A fresh secret: the prefix and 32 random bytes, base64url. */
export function newSecret(): { secret: string; prefix: string; digest: Buffer } {
  const secret = `${KEY_PREFIX}${randomBytes(32).toString('base64url')}`
  return { secret, prefix: secret.slice(0, SHOWN_PREFIX_LENGTH), digest: digestOf(secret) }
}

/**
 * The digest kept instead of the secret. A plain SHA-256 is enough because the
 * secret is 256 random bits: a slow password hash protects guessable inputs,
 * and there is nothing here to guess.
 */
export function digestOf(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest()
}

export function looksLikeApiKey(credential: string): boolean {
  return credential.startsWith(KEY_PREFIX) && credential.length <= 200
}

/** Why a key was not accepted. */
export type KeyRefusal = 'unknown' | 'revoked' | 'expired'
/** Why a key that was accepted stopped being. */
export type KeyEnd = 'revoked' | 'expired'

interface CachedKey {
  principal: Principal
  digestHex: string
  expiresAt: Date | null
  lastUsed: number
  /** The use last written (or read from the row); null when none was. */
  lastWritten: number | null
}

export interface ApiKeyringOptions {
  db: Queryable
  pollMs: number
  logger?: Pick<Logger, 'warn'>
  now?: () => number
}

export class ApiKeyring {
  private readonly byDigest = new Map<string, CachedKey>()
  private readonly byId = new Map<number, CachedKey>()
  /**
   * Digests of keys known revoked or expired: for good, so a client retrying a
   * dead key costs no query. Bounded: past the bound it starts afresh.
   */
  private readonly dead = new Map<string, 'revoked' | 'expired'>()
  /** Ids of keys ended here, for a lookup that was on its way when its key was revoked. */
  private readonly deadIds = new Map<number, KeyEnd>()
  private readonly refusedListeners = new Map<number, Set<(why: KeyEnd) => void>>()
  private timer: NodeJS.Timeout | null = null
  private inFlight: Promise<void> | null = null
  private closed = false
  private readonly now: () => number
  /** Polls issued since creation (tests). */
  polls = 0

  constructor(private readonly opts: ApiKeyringOptions) {
    this.now = opts.now ?? Date.now
  }

  /** The principal behind `secret`, or why not. Cached after the first lookup. */
  async authenticate(secret: string): Promise<Principal | KeyRefusal> {
    const digest = digestOf(secret)
    const hex = digest.toString('hex')
    const known = this.dead.get(hex)
    if (known) return known
    let cached = this.byDigest.get(hex)
    if (!cached) {
      const row = await apiKeys.byDigest(this.opts.db, digest)
      if (!row || !isRole(row.role)) return 'unknown'
      const refused = apiKeys.endOf(row, new Date(this.now()))
      if (refused) return this.bury(hex, refused)
      const ended = this.deadIds.get(row.id)
      if (ended) return this.bury(hex, ended)
      cached = {
        principal: {
          role: row.role,
          name: row.name,
          actor: row.name,
          teams: row.teams,
          source: 'apiKey',
          keyId: row.id,
          expiresAt: row.expiresAt,
        },
        digestHex: hex,
        expiresAt: row.expiresAt,
        lastUsed: this.now(),
        lastWritten: row.lastUsedAt?.getTime() ?? null,
      }
      // Two lookups of one new key may race here; the second simply replaces the first.
      this.byDigest.set(hex, cached)
      this.byId.set(row.id, cached)
      this.schedule()
    }
    if (cached.expiresAt && cached.expiresAt.getTime() <= this.now()) {
      this.forget(cached.principal.keyId as number, 'expired')
      return 'expired'
    }
    cached.lastUsed = this.now()
    return cached.principal
  }

  /** A key this instance revoked: refused here at once, not at the next poll. */
  revoked(id: number): void {
    this.forget(id)
  }

  /**
   * Call `listener` once when key `id` is refused (revoked anywhere, deleted),
   * or when it expires. Answers the function that stops listening. A
   * subscription holds its key in the cache for as long as it listens.
   */
  onRefused(id: number, expiresAt: Date | null | undefined, listener: (why: KeyEnd) => void): () => void {
    let set = this.refusedListeners.get(id)
    if (!set) {
      set = new Set()
      this.refusedListeners.set(id, set)
    }
    let done = false
    const fire = (why: KeyEnd) => {
      if (done) return
      done = true
      stop()
      listener(why)
    }
    set.add(fire)
    let expiry: NodeJS.Timeout | null = null
    if (expiresAt) {
      // setTimeout holds at most 2^31-1 ms; a later expiry is caught by the poll.
      const ms = expiresAt.getTime() - this.now()
      if (ms <= 0) queueMicrotask(() => fire('expired'))
      else if (ms < 2 ** 31 - 1) {
        // Timers follow a monotonic clock that may run a millisecond ahead of Date.now(): one more
        // millisecond makes "expired" true when said. The reason comes from the timer, not a clock.
        expiry = setTimeout(() => fire('expired'), ms + 1)
        expiry.unref?.()
      }
    }
    const stop = () => {
      done = true
      if (expiry) clearTimeout(expiry)
      const s = this.refusedListeners.get(id)
      s?.delete(fire)
      if (s?.size === 0) this.refusedListeners.delete(id)
    }
    this.schedule()
    return stop
  }

  /** Keys cached right now. */
  get size(): number {
    return this.byId.size
  }

  async close(): Promise<void> {
    this.closed = true
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    await this.inFlight
  }

  private bury(hex: string, why: KeyEnd): KeyEnd {
    if (this.dead.size >= MAX_DEAD) this.dead.clear()
    this.dead.set(hex, why)
    return why
  }

  private forget(id: number, why: KeyEnd = 'revoked'): void {
    if (this.deadIds.size >= MAX_DEAD) this.deadIds.clear()
    this.deadIds.set(id, why)
    const cached = this.byId.get(id)
    if (cached) {
      this.byId.delete(id)
      this.byDigest.delete(cached.digestHex)
      this.bury(cached.digestHex, why)
    }
    const listeners = this.refusedListeners.get(id)
    if (listeners) for (const l of [...listeners]) l(why)
  }

  private watchedIds(): number[] {
    return [...new Set([...this.byId.keys(), ...this.refusedListeners.keys()])]
  }

  private schedule(): void {
    if (this.closed || this.timer || this.inFlight || this.watchedIds().length === 0) return
    this.timer = setTimeout(() => {
      this.timer = null
      this.inFlight = this.poll()
        .catch((err: unknown) =>
          this.opts.logger?.warn({ err }, 'API key poll failed; keys stay as they were until the next one'),
        )
        .finally(() => {
          this.inFlight = null
          this.schedule()
        })
    }, this.opts.pollMs)
    this.timer.unref?.()
  }

  private async poll(): Promise<void> {
    const now = this.now()
    // Idle keys leave the cache (a key held by a subscription stays: it is listened to).
    for (const [id, cached] of this.byId) {
      if (now - cached.lastUsed > IDLE_EVICT_MS && !this.refusedListeners.has(id)) {
        this.byId.delete(id)
        this.byDigest.delete(cached.digestHex)
      }
    }
    const ids = this.watchedIds()
    if (ids.length === 0) return
    this.polls++
    const refused = await apiKeys.refusedAmong(this.opts.db, ids, new Date(now))
    // The reason is the row's: a key watched by a listener but never used here is not
    // in the cache, and its expiry would otherwise be told as a revocation.
    for (const { id, why } of refused) this.forget(id, why)
    const used = [...this.byId.entries()]
      .filter(([, c]) => c.lastWritten === null || c.lastUsed - c.lastWritten >= LAST_USED_RESOLUTION_MS)
      .map(([id, c]) => {
        c.lastWritten = c.lastUsed
        return id
      })
    if (used.length > 0) await apiKeys.touch(this.opts.db, used, new Date(now), LAST_USED_RESOLUTION_MS)
  }
}
