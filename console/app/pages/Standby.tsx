/**
 * Stand-by: what each running show will ask of a person next and about when,
 * the way show-control software lists the next cue, so no cue surprises anyone.
 */

import { allPages } from '../api.ts'
import { duration, scopeLabel } from '../format.ts'
import { useLive, useNow } from '../live.ts'
import { RUN_CHANGES, type RunWithSteps, STANDBY, STANDBY_PAGE_SIZE } from '../operations.ts'
import { useSession } from '../session.ts'
import { standbyList } from '../standby.ts'
import { At, ErrorNote, Loading, StatusBadge } from '../ui.tsx'

const loadRuns = (token: string) => allPages<RunWithSteps>(token, STANDBY, STANDBY_PAGE_SIZE, 500)

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
  const list = standbyList(runs, now)
  const without = runs.length - list.length
  return (
    <>
      <h1>Stand-by</h1>
      <p class="muted small">
        The next cue of each run in progress, soonest first. Times are the earliest the cue can come up: the
        current wait, then every wait before the cue.
      </p>
      <ErrorNote error={q.error} />
      {list.length === 0 ? (
        <p class="empty">No run in progress has a cue ahead.</p>
      ) : (
        <div class="panel">
          <ol class="rows standby" aria-label="Next cues, soonest first">
            {list.map((c) => (
              <li key={c.run.id} class="row">
                <div class="row-main">
                  <strong class="cue-prompt">{c.prompt}</strong>
                </div>
                <div class="row-meta">
                  <a href={`#/runs/${c.run.id}`}>{c.run.definition.title}</a>
                  <span class="muted">{scopeLabel(c.run.scope)}</span>
                  <span>phase {c.step.phase}</span>
                  <StatusBadge status={c.run.status} />
                  <span class="eta">
                    {c.run.status === 'PAUSED' ? (
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
