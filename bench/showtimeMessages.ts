/**
 * The messages between bench/showtime.ts and its clients' process
 * (bench/showtimeClients.ts): the commands it is driven by over IPC, and the
 * samples and reports it sends back.
 */
export type Command =
  | {
      type: 'connect'
      /**
       * The instances the clients use, spread evenly: operator i and dashboard
       * i go to instance i mod n (answers too, to the operator's instance).
       */
      wsUrls: string[]
      graphqlUrls: string[]
      /** One `/healthz` prober per URL (every instance, API-only or not); samples name their index. */
      healthUrls: string[]
      operatorTokens: string[]
      viewerToken: string
      dashboards: number
      answersInFlight: number
      /** Operators answer only cues of definitions whose slug matches this; its group 1 is the show's number. */
      answerSlugPattern: string
      /**
       * `mine`: each operator's own cues (`waitingSteps(mine: true)`); `all`:
       * everybody's inbox; `changes`: their own cues as changes
       * (`waitingStepChanges(mine: true)`), only what is new in each event.
       */
      inbox: 'mine' | 'all' | 'changes'
    }
  | { type: 'report' }
  /** The show's instant: the event-loop delay the next report gives is from now. */
  | { type: 'instant' }
  | { type: 'health' }
  | { type: 'burst'; stepIds: string[]; timeoutMs: number; retryRounds: number }
  | { type: 'hostile'; sockets: number; perSocket: number }
  | { type: 'hostileStop' }
  | { type: 'finish' }

export interface HealthSample {
  at: number
  ms: number
  ok: boolean
  /** Which of the connect command's `healthUrls` was probed. */
  instance: number
}

export interface AnswerSample {
  stepId: string
  operator: number
  /** When the request was sent (ms since the epoch). */
  sentAt: number
  ms: number
  applied: boolean | null
  /** true for the deliberate second answer of one cue in ten. */
  second: boolean
  error: string | null
}

export interface Sighting {
  stepId: string
  /** The step's startedAt as delivered (when it parked). */
  parkedAt: number
  firstAnyAt: number
  firstOwnerAt: number | null
}

export interface ClientsReport {
  type: 'report'
  health: HealthSample[]
  answers: AnswerSample[]
  sightings: Sighting[]
  dashboardDeliveries: { at: number; delayMs: number }[]
  receiverKeys: string[]
  errors: string[]
  rssMb: number
  /**
   * This process's own event-loop delay since the last report (ms, the
   * sampling resolution subtracted): a client that lags stamps what it
   * receives late, and that lag is the bench's, not the server's.
   */
  eld: { p99Ms: number; maxMs: number }
}

export interface BurstAnswer {
  status: number
  code: string | null
  retryAfter: string | null
  applied: boolean | null
  socketError: string | null
  ms: number
}

export interface BurstReport {
  type: 'burstDone'
  first: BurstAnswer[]
  /** Answers to the retries of the ones refused as busy, round by round. */
  retries: BurstAnswer[][]
  wallMs: number
}
