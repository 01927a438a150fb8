/**
 * The limits on what one request or one socket may ask of the server: their
 * shape and their defaults. Each is read from its environment variable in
 * config.ts and enforced where it applies.
 */

/** What one request or one socket may ask of the server; each has an environment variable. */
export interface RequestLimits {
  /** Deepest selection (MAX_QUERY_DEPTH). @default 10 */
  maxDepth: number
  /** Largest computed query cost (MAX_QUERY_COST). @default 20000 */
  maxCost: number
  /** Most aliases in one document (MAX_QUERY_ALIASES). @default 30 */
  maxAliases: number
  /** Most lexical tokens in one document (MAX_QUERY_TOKENS). @default 2000 */
  maxTokens: number
  /** Most schedule occurrences one request may compute, over every `nextOccurrences` (MAX_OCCURRENCES_PER_REQUEST). @default 2000 */
  maxOccurrences: number
  /** Operations one WebSocket may have in flight (WS_MAX_SUBSCRIPTIONS). @default 100 */
  wsMaxSubscriptions: number
  /** Milliseconds a WebSocket has to send connection_init before it is closed (WS_INIT_TIMEOUT_MS). @default 3000 */
  wsInitTimeoutMs: number
  /** Subscriptions one principal may hold open at once, over all its sockets and SSE streams (SUBSCRIPTIONS_PER_PRINCIPAL). @default 200 */
  subscriptionsPerPrincipal: number
  /** Subscriptions one instance holds open at once, everybody's (SUBSCRIPTIONS_PER_INSTANCE). @default 5000 */
  subscriptionsPerInstance: number
  /** Largest answer one request may get, in bytes (MAX_ANSWER_BYTES). @default 16777216 */
  maxAnswerBytes: number
  /** Largest `params` a run may carry, in bytes of JSON (MAX_PARAMS_BYTES). @default 65536 */
  maxParamsBytes: number
}

/** The limits' defaults; tests and library callers start from these. */
export const DEFAULT_LIMITS: RequestLimits = {
  maxDepth: 10,
  maxCost: 20_000,
  maxAliases: 30,
  maxTokens: 2000,
  maxOccurrences: 2000,
  wsMaxSubscriptions: 100,
  wsInitTimeoutMs: 3000,
  subscriptionsPerPrincipal: 200,
  subscriptionsPerInstance: 5000,
  maxAnswerBytes: 16 * 1024 * 1024,
  maxParamsBytes: 64 * 1024,
}
