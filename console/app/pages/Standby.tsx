/**
 * Stand-by: what each running show will ask of a person next and about when,
 * the way show-control software lists the next cue, so no cue surprises anyone.
 */

import { allPages } from '../api.ts'
import { duration, scopeLabel, viewerZone } from '../format.ts'
import { useLive, useNow } from '../live.ts'
import {
  RUN_CHANGES,
  type RunWithSteps,
  SCHEDULED_HORIZON_MS,
  SCHEDULED_PAGE,
  SCHEDULED_PAGE_SIZE,
  type ScheduledRun,
  STANDBY,
  STANDBY_PAGE_SIZE,
} from '../operations.ts'
import { useSession } from '../session.ts'
import { standbyList } from '../standby.ts'
import { At, Countdown, ErrorNote, Loading, StatusBadge } from '../ui.tsx'

/** Runs waiting to start before the horizon (the board's "Next up" reads the same). */
export function loadScheduled(token: string): Promise<{ nodes: ScheduledRun[]; more: boolean }> {
  return allPages(token, SCHEDULED_PAGE, SCHEDULED_PAGE_SIZE, 500, {
    until: new Date(Date.now() + SCHEDULED_HORIZON_MS).toISOString(),
  })
}

async function loadRuns(token: string): Promise<{ nodes: RunWithSteps[]; scheduled: ScheduledRun[] }> {
  const [inProgress, scheduled] = await Promise.all([
    allPages(token, STANDBY, STANDBY_PAGE_SIZE, 500),
    loadScheduled(token),
  ])
  return { nodes: inProgress.nodes, scheduled: scheduled.nodes }
}

export function Standby() {
  const { token } = useSession()
  const now = useNow()
  const q = useLive(token, loadRuns, { subscription: { query: RUN_CHANGES }, livePollMs: 5000 })
  const d = q.data
  if (!d)
    return (
      <>
        <h1>Stand-by</h1>
        {q.error ? <ErrorNote error={q.error} /> : <Loading what="stand-by" />}
      </>
    )
  const runs = d.nodes
  const list = standbyList(runs, now, d.scheduled)
  const without = runs.filter((r) => !list.some((c) => c.run.id === r.id)).length
  return (
    <>
      <h1>Stand-by</h1>
      <p class="muted small">
        The cues waiting on a person now, then the next cue of each run in progress or scheduled by a person,
        soonest first. Times (your time, {viewerZone}) are the earliest the cue can come up: the current wait,
        then every wait before the cue.
      </p>
      <ErrorNote error={q.error} />
      {list.length === 0 ? (
        <p class="empty">No run in progress or scheduled has a cue ahead.</p>
      ) : (
        <div class="panel">
          <ol class="rows standby" aria-label="Next cues, soonest first">
            {list.map((c) => (
              <li
                key={`${c.run.id}-${c.step?.id ?? 'first'}`}
                class={`row${c.waitingNow ? ' live-cue' : ''}`}
              >
                <div class="row-main">
                  <strong class="cue-prompt">{c.prompt}</strong>
                </div>
                <div class="row-meta">
                  <a href={`#/runs/${c.run.id}`}>{c.run.definition.title}</a>
                  <span class="muted">{scopeLabel(c.run.scope)}</span>
                  <span>phase {c.phase}</span>
                  <StatusBadge status={c.run.status} />
                  <span class="eta">
                    {c.waitingNow ? (
                      <>
                        <strong>waiting now</strong> — <a href="#/inbox">answer</a>
                        <span class="kbd-hint">
                          {' '}
                          (<kbd>a</kbd>)
                        </span>
                        {c.waitingNow.deadlineAt && (
                          <>
                            {' '}
                            · <Countdown iso={c.waitingNow.deadlineAt} now={now} />
                          </>
                        )}
                      </>
                    ) : c.run.status === 'PAUSED' ? (
                      'when the run resumes'
                    ) : c.blockedByCue ? (
                      c.eta !== null && c.eta - now >= 1500 ? (
                        `${duration(c.eta - now)} after the cue waiting now is answered`
                      ) : (
                        'as soon as the cue waiting now is answered'
                      )
                    ) : c.eta !== null && c.eta - now < 1500 ? (
                      'any moment'
                    ) : c.eta !== null ? (
                      <>
                        in about {duration(c.eta - now)} (<At iso={new Date(c.eta).toISOString()} />)
                      </>
                    ) : null}
                  </span>
                  {c.scheduledBy !== undefined && (
                    <span class="muted" data-testid="scheduled-by">
                      starts <At iso={c.run.scheduledFor} />, scheduled by {c.scheduledBy ?? 'someone'}
                    </span>
                  )}
                  {c.waits > 0 && (
                    <span class="muted">
                      after {c.waits} wait{c.waits === 1 ? '' : 's'}
                    </span>
                  )}
                </div>
              </li>
            ))}
          </ol>
        </div>
      )}
      {without > 0 && (
        <p class="muted small">
          {without} run{without === 1 ? '' : 's'} in progress {without === 1 ? 'has' : 'have'} no cue ahead.
        </p>
      )}
    </>
  )
}
