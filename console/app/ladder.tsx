/** A cue's ladder in one line: who it is for, reminders and escalations sent, the deadline, who answered and how. */
import { Fragment } from 'preact'
import { useNow } from './live.ts'
import type { CueLadder } from './operations.ts'
import { At, Countdown } from './ui.tsx'

/** How a cue ended, in words: answered, skipped or timed out, each its own badge (not the step's "completed"). */
export function CueOutcome({ cue }: { cue: CueLadder | null | undefined }) {
  const outcome = cue?.answer?.outcome
  if (!outcome) return null
  const [label, tone] =
    outcome === 'timedOut'
      ? ['timed out', 'failed']
      : outcome === 'skipped'
        ? ['skipped', 'skipped']
        : ['answered', 'completed']
  return (
    <span class={`badge s-${tone}`} data-testid="cue-outcome">
      {label}
    </span>
  )
}

function LiveCountdown({ iso, zone }: { iso: string; zone?: string }) {
  const now = useNow()
  return <Countdown iso={iso} now={now} zone={zone} />
}

export function Ladder({ cue, zone }: { cue: CueLadder | null | undefined; zone?: string }) {
  if (!cue) return null
  const parts: preact.ComponentChildren[] = []
  parts.push(
    cue.assignees.length > 0 ? (
      <span key="for">
        for {cue.assignees.join(', ')}
        {cue.exclusive ? ' only' : ''}
      </span>
    ) : (
      <span key="for">for anyone who may operate</span>
    ),
  )
  if (cue.remindersSent > 0)
    parts.push(
      <span key="rem">{`${cue.remindersSent} reminder${cue.remindersSent === 1 ? '' : 's'} sent`}</span>,
    )
  if (cue.escalationLevel > 0) parts.push(<span key="esc">{`escalated ×${cue.escalationLevel}`}</span>)
  if (cue.deadlineAt && !cue.answer)
    parts.push(
      <span key="dl" data-testid="cue-deadline">
        <LiveCountdown iso={cue.deadlineAt} zone={zone} /> (at <At iso={cue.deadlineAt} zone={zone} />)
      </span>,
    )
  if (cue.answer)
    parts.push(
      <span key="ans" data-testid="cue-answer">
        {cue.answer.outcome === 'timedOut'
          ? 'timed out, nobody answered'
          : `${cue.answer.outcome === 'skipped' ? 'skipped' : 'answered'} by ${cue.answer.by} via ${cue.answer.via}`}{' '}
        <At iso={cue.answer.at} zone={zone} />
        {cue.answer.note ? `: “${cue.answer.note}”` : ''}
      </span>,
    )
  return (
    <div class="muted small ladder" data-testid="cue-ladder">
      {parts.map((p, i) => (
        <Fragment key={String(i)}>
          {i > 0 && ' · '}
          {p}
        </Fragment>
      ))}
    </div>
  )
}
