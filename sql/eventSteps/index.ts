/**
 * `event_run_steps`, one module per job: `rows.ts` (shapes), `insert.ts`
 * (expanding programs into rows), `read.ts` (readers and the cue inbox),
 * `moves.ts` (the guarded moves a step makes). Callers import this index.
 */
export * from './insert.ts'
export * from './moves.ts'
export * from './read.ts'
export type { StepRow, StepSpec } from './rows.ts'
