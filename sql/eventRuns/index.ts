/**
 * `event_runs`, one module per audience: `read.ts` for the API; `materialise.ts`
 * for making runs; `due.ts`, `startLock.ts`, `claimStart.ts` (with `overlap.ts`), `claims.ts`
 * and `transitions.ts` for the runner; `counts.ts` and `retention.ts` for
 * health, metrics and history. Callers import this index.
 */
export { TERMINAL } from '../states.ts'
export * from './bulk.ts'
export * from './claimStart.ts'
export * from './claims.ts'
export * from './claimsWithSteps.ts'
export * from './counts.ts'
export * from './due.ts'
export * from './handOff.ts'
export * from './materialise.ts'
export type { OverlapOutcome } from './overlap.ts'
export * from './pauseHold.ts'
export * from './read.ts'
export * from './retention.ts'
export * from './retry.ts'
export type { RunListRow, RunRow, RunWithDefinition } from './rows.ts'
export * from './startLock.ts'
export * from './transitions.ts'
