/** The live board: health, runs in progress, what comes next, what just ended. */

import { allPages, gql } from '../api.ts'
import { duration, scopeLabel, viewerZone } from '../format.ts'
import { useLive, useNow } from '../live.ts'
import {
  BOARD,
  type BoardData,
  type HealthData,
  IN_PROGRESS_PAGE,
  IN_PROGRESS_PAGE_SIZE,
  RUN_CHANGES,
  type RunCard,
  SCHEDULED_CARDS,
  SCHEDULED_HORIZON_MS,
  SCHEDULED_PAGE_SIZE,
  type ScheduledCard,
} from '../operations.ts'
import { useSession } from '../session.ts'
import { scheduledByPerson } from '../standby.ts'
import { Ago, At, ErrorNote, HealthBadge, Loading, Readable, Section, StatusBadge, ZoneNote } from '../ui.tsx'

export function HealthStrip({ health, now }: { health: HealthData; now: number }) {
  const oldest = health.oldestWaitingStepAt
  return (
    <section class="strip" aria-label="System health">
      <div class={`tile ${health.database ? 'good' : 'bad'}`}>
        <span class="tile-label">Database</span>
        <strong>{health.database ? 'reachable' : 'unreachable'}</strong>
      </div>
      <div class={`tile ${health.runners.length > 0 ? 'good' : 'bad'}`}>
        <span class="tile-label">Runners</span>
        <strong>{health.runners.length === 0 ? 'none ticking' : `${health.runners.length} ticking`}</strong>
        {health.runners.length > 0 && (
          <ul class="runners">
            {health.runners.map((r) => (
              <li key={r.id} title={`${r.id} on ${r.host}`}>
                {r.host}: tick {r.tickLagMs} ms late
              </li>
            ))}
          </ul>
        )}
      </div>
      <div class={`tile ${health.waitingSteps === 0 ? 'good' : 'warn'}`}>
        <span class="tile-label">Cues waiting</span>
        <strong>
          <a href="#/inbox">{health.waitingSteps}</a>
        </strong>
        {oldest && <span>oldest waiting {duration(now - Date.parse(oldest))}</span>}
      </div>
      <div class={`tile ${health.degradedRuns === 0 ? 'good' : 'warn'}`}>
        <span class="tile-label">Degraded runs</span>
        <strong>{health.degradedRuns}</strong>
      </div>
    </section>
  )
}

function RunRow({ run, now }: { run: RunCard; now: number }) {
  return (
    <li class="row">
      <div class="row-main">
        <a href={`#/runs/${run.id}`} class="row-title">
          {run.definition.title}
        </a>
        <span class="muted"> · {scopeLabel(run.scope)} </span>
        {run.rehearsal && <span class="badge s-rehearsal">rehearsal</span>}
      </div>
      <div class="row-meta">
        <StatusBadge status={run.status} />
        <HealthBadge health={run.health} />
        {run.currentPhase && <span>phase {run.currentPhase}</span>}
        {run.waitingSteps > 0 && (
          <a href="#/inbox" class="badge s-cue">
            {run.waitingSteps} cue{run.waitingSteps === 1 ? '' : 's'} waiting
          </a>
        )}
        <span class="muted">
          started <Ago iso={run.startedAt ?? run.scheduledFor} now={now} />
        </span>
      </div>
      {run.lastError && run.health === 'DEGRADED' && (
        <div class="row-error">
          <Readable text={run.lastError} />
        </div>
      )}
    </li>
  )
}

/** Most runs in progress the board lists. */
export const BOARD_MAX_RUNS = 500

type Loaded = BoardData & { inProgress: { nodes: RunCard[]; more: boolean }; scheduled: ScheduledCard[] }

async function loadBoard(token: string): Promise<Loaded> {
  const [rest, inProgress, scheduled] = await Promise.all([
    gql(token, BOARD),
    allPages(token, IN_PROGRESS_PAGE, IN_PROGRESS_PAGE_SIZE, BOARD_MAX_RUNS),
    allPages(token, SCHEDULED_CARDS, SCHEDULED_PAGE_SIZE, 500, {
      until: new Date(Date.now() + SCHEDULED_HORIZON_MS).toISOString(),
    }),
  ])
  return { ...rest, inProgress, scheduled: scheduled.nodes }
}

/** One line of "Next up": an occurrence of a schedule, or a run a person scheduled. */
type NextUp =
  | { at: string; def: BoardData['definitions'][number]; run?: undefined }
  | { at: string; run: ScheduledCard; def?: undefined }

export function Board() {
  const { token } = useSession()
  const now = useNow()
  const board = useLive<Loaded>(token, loadBoard, { subscription: { query: RUN_CHANGES }, livePollMs: 5000 })
  const d = board.data
  if (!d)
    return (
      <>
        <h1>Board</h1>
        {board.error ? <ErrorNote error={board.error} /> : <Loading what="the board" />}
      </>
    )
  const more = d.inProgress.more
  const inProgress = [...d.inProgress.nodes].sort(
    (a, b) => Date.parse(a.scheduledFor) - Date.parse(b.scheduledFor) || Number(a.id) - Number(b.id),
  )
  const ended = [...d.ended.nodes]
    .sort((a, b) => Date.parse(b.endedAt ?? b.scheduledFor) - Date.parse(a.endedAt ?? a.scheduledFor))
    .slice(0, 8)
  const next: NextUp[] = [
    ...d.definitions
      .filter((def) => def.state === 'ACTIVE')
      .flatMap((def) => def.nextOccurrences.map((at) => ({ def, at }))),
    ...d.scheduled.filter(scheduledByPerson).map((run) => ({ run, at: run.scheduledFor })),
  ]
    .sort((a, b) => Date.parse(a.at) - Date.parse(b.at))
    .slice(0, 8)
  return (
    <>
      <h1>Board</h1>
      <ZoneNote />
      <ErrorNote error={board.error} />
      <HealthStrip health={d.health} now={now} />
      <div class="columns">
        <Section
          title={`In progress (${inProgress.length}${more ? '+' : ''})`}
          id="in-progress"
          extra={<span class="muted small">{board.live ? 'live' : 'polling'}</span>}
        >
          {inProgress.length === 0 ? (
            <p class="muted">No run is in progress.</p>
          ) : (
            <ul class="rows" data-testid="in-progress">
              {inProgress.map((r) => (
                <RunRow key={r.id} run={r} now={now} />
              ))}
            </ul>
          )}
        </Section>
        <div class="stack">
          <Section title={`Next up (your time, ${viewerZone})`} id="next-up">
            {next.length === 0 ? (
              <p class="muted">Nothing is scheduled.</p>
            ) : (
              <ul class="rows compact">
                {next.map((n) =>
                  n.run ? (
                    <li key={`run-${n.run.id}`} class="row" data-testid="next-up-run">
                      <a href={`#/runs/${n.run.id}`}>{n.run.definition.title}</a>
                      <span class="muted"> · {scopeLabel(n.run.scope)}</span>
                      <span class="muted">
                        {' '}
                        <At iso={n.at} /> (<Ago iso={n.at} now={now} />) · scheduled by{' '}
                        {n.run.startedBy ?? '—'}
                      </span>
                    </li>
                  ) : (
                    <li key={`${n.def.id}-${n.at}`} class="row">
                      <a href={`#/definitions/${n.def.id}`}>{n.def.title}</a>
                      <span class="muted">
                        {' '}
                        <At iso={n.at} /> (<Ago iso={n.at} now={now} />)
                      </span>
                    </li>
                  ),
                )}
              </ul>
            )}
          </Section>
          <Section title="Just ended" id="just-ended">
            {ended.length === 0 ? (
              <p class="muted">No run has ended yet.</p>
            ) : (
              <ul class="rows compact">
                {ended.map((r) => (
                  <li key={r.id} class="row">
                    <a href={`#/runs/${r.id}`}>{r.definition.title}</a>
                    <span class="muted"> · {scopeLabel(r.scope)} </span>
                    <StatusBadge status={r.status} />{' '}
                    <span class="muted">
                      <Ago iso={r.endedAt ?? r.scheduledFor} now={now} />
                    </span>
                  </li>
                ))}
              </ul>
            )}
          </Section>
        </div>
      </div>
    </>
  )
}
