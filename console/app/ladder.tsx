/** A cue's ladder in one line: who it is for, reminders and escalations sent, the deadline, who answered and how. */
import { Fragment } from 'preact'
import type { CueLadder } from './operations.ts'
import { At } from './ui.tsx'

export function Ladder({ cue }: { cue: CueLadder | null | undefined }) {
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
      <span key="dl">
        deadline <At iso={cue.deadlineAt} />
      </span>,
    )
  if (cue.answer)
    parts.push(
      <span key="ans" data-testid="cue-answer">
        {cue.answer.outcome === 'timedOut'
          ? 'timed out'
          : `${cue.answer.outcome} by ${cue.answer.by} via ${cue.answer.via}`}{' '}
        <At iso={cue.answer.at} />
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
