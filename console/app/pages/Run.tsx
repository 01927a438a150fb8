/** One run: its steps as a timeline, its log, and the run controls. */
import type { TadaDocumentNode } from '../../../src/client/graphql.ts'
import { ApiError, gql } from '../api.ts'
import { duration, json, promptOf, scopeLabel, viewerZone, when } from '../format.ts'
import { CueOutcome, Ladder } from '../ladder.tsx'
import { useLive, useNow } from '../live.ts'
import {
  CANCEL_RUN,
  PAUSE_RUN,
  RESUME_RUN,
  RETRY_STEP_NOW,
  RUN,
  RUN_STATUS,
  type RunData,
  SKIP_STEP,
  type StepCard,
} from '../operations.ts'
import { can, useSession } from '../session.ts'
import {
  ActionButton,
  Ago,
  At,
  ErrorNote,
  HealthBadge,
  Loading,
  Readable,
  ReasonAction,
  Section,
  StatusBadge,
} from '../ui.tsx'
import { RunOrigins } from './ShowOps.tsx'

const UNFINISHED = new Set(['SCHEDULED', 'STARTING', 'RUNNING', 'PAUSED', 'ENDING'])

/**
 * A step a person may skip from the run page: one that is failing and
 * retrying (it has an error and has not finished), or a wait in progress. A
 * parked cue is answered or skipped from the inbox.
 */
/** A step waiting out a retry backoff: failed at least once, attempts left, its next attempt ahead. */
function inBackoff(step: StepCard, now: number): boolean {
  return step.status === 'PENDING' && step.attempts > 0 && !!step.wakeAt && Date.parse(step.wakeAt) > now
}

function skippable(step: StepCard): boolean {
  if (step.status !== 'RUNNING' && step.status !== 'PENDING') return false
  if (step.parked) return false
  return step.lastError !== null || (step.kind === 'core.wait' && step.status === 'RUNNING')
}

export function RunPage({ id }: { id: string }) {
  const session = useSession()
  const now = useNow()
  const q = useLive<RunData>(session.token, RUN, {
    variables: { id },
    subscription: { query: RUN_STATUS, variables: { id } },
    livePollMs: 3000,
  })
  const run = q.data?.run
  if (q.data && !run)
    return (
      <>
        <h1>Run {id}</h1>
        <p class="error">No run has id {id}.</p>
      </>
    )
  if (!run)
    return (
      <>
        <h1>Run {id}</h1>
        {q.error ? <ErrorNote error={q.error} /> : <Loading what={`run ${id}`} />}
      </>
    )

  async function control(
    mutation: TadaDocumentNode<Record<string, { applied: boolean }>, { id: string; reason?: string }>,
    verb: string,
    variables: { reason?: string } = {},
  ) {
    try {
      const data = await gql(session.token, mutation, { id, ...variables })
      const applied = Object.values(data)[0]?.applied
      session.notify(
        applied ? `${verb}.` : `Not ${verb.toLowerCase()}: the run had already moved on.`,
        applied ? 'ok' : 'error',
      )
    } catch (err) {
      session.notify(err instanceof ApiError ? err.message : String(err), 'error')
    }
    await q.refetch()
  }

  const operator = can(session, 'OPERATOR')
  // One zone for the whole page, the show's; the viewer's beside it where it differs.
  const zone = run.timezone
  const sameZone = when(run.scheduledFor, zone) === when(run.scheduledFor, viewerZone)
  return (
    <>
      <h1>
        {run.definition.title} <span class="muted">· {scopeLabel(run.scope)}</span>
      </h1>
      <ErrorNote error={q.error} />
      <div class="run-summary">
        <StatusBadge status={run.status} />
        <HealthBadge health={run.health} />
        {run.rehearsal && <span class="badge s-rehearsal">rehearsal</span>}
        {run.currentPhase && <span>phase {run.currentPhase}</span>}
        <span class="muted">
          scheduled <At iso={run.scheduledFor} zone={zone} />
          {!sameZone && (
            <>
              {' '}
              (<At iso={run.scheduledFor} zone={viewerZone} /> your time)
            </>
          )}
        </span>
        <span class="muted">
          started by {run.startedBy ?? '—'} · version {run.version.version}
        </span>
        {run.endedAt && (
          <span class="muted">
            ended <Ago iso={run.endedAt} now={now} zone={zone} />
          </span>
        )}
      </div>
      <p class="muted small" data-testid="page-zone">
        Times on this page are in {zone}, the show's time zone
        {sameZone ? '' : `; yours is ${viewerZone}`}.
      </p>
      {run.lastError && (
        <p class="row-error">
          Last error: <Readable text={run.lastError} zone={zone} />
        </p>
      )}
      <RunOrigins
        id={run.id}
        status={run.status}
        ended={run.endedAt}
        failedStep={run.steps.findLast((st) => st.status === 'FAILED')?.seq ?? null}
        stepCount={run.steps.length}
      />
      {run.concurrencyHolder && (
        <p class="muted">
          Held back by{' '}
          <a href={`#/runs/${run.concurrencyHolder.id}`}>{run.concurrencyHolder.definition.title}</a> (
          {scopeLabel(run.concurrencyHolder.scope)}), which holds the same concurrency key.
        </p>
      )}
      {operator && UNFINISHED.has(run.status) && (
        <fieldset class="controls">
          <legend class="visually-hidden">Run controls</legend>
          {(run.status === 'RUNNING' || run.status === 'ENDING') && (
            <ActionButton label="Pause" run={() => control(PAUSE_RUN, 'Paused')} />
          )}
          {run.status === 'PAUSED' && (
            <ActionButton label="Resume" kind="primary" run={() => control(RESUME_RUN, 'Resumed')} />
          )}
          <ReasonAction
            label="Cancel run"
            confirmLabel="Cancel the run"
            kind="danger"
            placeholder="why (kept with the run)"
            run={async (reason) =>
              session.later('Cancelling the run', () => control(CANCEL_RUN, 'Cancelled', { reason }))
            }
          />
        </fieldset>
      )}
      <div class="columns">
        <Section title="Steps" id="steps">
          <ol class="timeline">
            {run.steps.map((s) => (
              <li key={s.id} class={`step st-${s.status.toLowerCase()}${s.parked ? ' parked' : ''}`}>
                <div class="step-head">
                  <span class="step-kind">{s.kind}</span>
                  <span class="muted">phase {s.phase}</span>
                  {s.kind === 'core.cue' && s.cue?.answer ? (
                    <CueOutcome cue={s.cue} />
                  ) : (
                    <StatusBadge status={s.status} />
                  )}
                  {s.parked && <span class="badge s-cue">waiting on a person</span>}
                  {s.attempts > 1 && (
                    <span class="muted">
                      attempt {s.attempts} of {s.maxAttempts}
                    </span>
                  )}
                </div>
                {s.kind === 'core.cue' && <div>“{promptOf(s.params)}”</div>}
                {s.kind === 'core.cue' && <Ladder cue={s.cue} zone={zone} />}
                <div class="muted small">
                  {s.startedAt && (
                    <>
                      started <At iso={s.startedAt} zone={zone} />
                    </>
                  )}
                  {s.startedAt && s.endedAt && (
                    <> · took {duration(Date.parse(s.endedAt) - Date.parse(s.startedAt))}</>
                  )}
                  {s.wakeAt && s.status === 'RUNNING' && !s.parked && (
                    <>
                      {' '}
                      · wakes <Ago iso={s.wakeAt} now={now} zone={zone} />
                    </>
                  )}
                  {s.wakeAt && inBackoff(s, now) && (
                    <span data-testid="next-attempt">
                      {' '}
                      · next attempt <At iso={s.wakeAt} zone={zone} /> (
                      <Ago iso={s.wakeAt} now={now} zone={zone} />)
                    </span>
                  )}
                </div>
                {s.lastError && (
                  <div class="row-error">
                    <Readable text={s.lastError} zone={zone} />
                  </div>
                )}
                {operator && (run.status === 'RUNNING' || run.status === 'ENDING') && inBackoff(s, now) && (
                  <ActionButton
                    label="Retry now"
                    kind="primary"
                    run={async () => {
                      try {
                        const d = await gql(session.token, RETRY_STEP_NOW, { stepId: s.id })
                        session.notify(
                          d.retryStepNow.applied
                            ? `Retrying step ${s.seq + 1} now (attempt ${d.retryStepNow.step.attempts + 1} of ${s.maxAttempts}).`
                            : 'Not retried: the step had already moved on.',
                          d.retryStepNow.applied ? 'ok' : 'error',
                        )
                      } catch (err) {
                        session.notify(err instanceof ApiError ? err.message : String(err), 'error')
                      }
                      await q.refetch()
                    }}
                  />
                )}
                {operator && UNFINISHED.has(run.status) && skippable(s) && (
                  <ReasonAction
                    label="Skip step"
                    confirmLabel="Skip this step"
                    placeholder="why (kept with the run)"
                    run={async (reason) =>
                      session.later(`Skipping step ${s.seq + 1}`, async () => {
                        try {
                          const d = await gql(session.token, SKIP_STEP, { stepId: s.id, reason })
                          session.notify(
                            d.skipStep.applied
                              ? 'Step skipped.'
                              : 'Not skipped: the step had already finished.',
                            d.skipStep.applied ? 'ok' : 'error',
                          )
                        } catch (err) {
                          session.notify(err instanceof ApiError ? err.message : String(err), 'error')
                        }
                        await q.refetch()
                      })
                    }
                  />
                )}
                {s.result !== null && s.result !== undefined && (
                  <details>
                    <summary>Result</summary>
                    <pre>{json(s.result)}</pre>
                  </details>
                )}
              </li>
            ))}
          </ol>
        </Section>
        <Section title="Log" id="log">
          {run.logs.length === 0 ? (
            <p class="muted">Nothing logged.</p>
          ) : (
            <ol class="log" aria-label="Log, newest first">
              {run.logs.map((l) => (
                <li key={l.id} class={`lv-${l.level}`}>
                  <At iso={l.at} zone={zone} /> <span class="lv">{l.level}</span>{' '}
                  <Readable text={l.message} zone={zone} />
                  {l.actor && <span class="muted"> — {l.actor}</span>}
                </li>
              ))}
            </ol>
          )}
        </Section>
      </div>
    </>
  )
}
