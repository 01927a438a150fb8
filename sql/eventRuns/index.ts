/**
 * `event_runs`, one module per audience: `read.ts` for the API, `materialise.ts`
 * for making runs, `claims.ts` and `transitions.ts` for the runner, `counts.ts`
 * for health, metrics and retention. Callers import this index.
 */
export { TERMINAL } from '../states.ts'
export * from './claims.ts'
export * from './counts.ts'
export * from './materialise.ts'
export * from './read.ts'
export * from './retention.ts'
export type { RunListRow, RunRow } from './rows.ts'
export * from './transitions.ts'
