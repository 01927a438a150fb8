/**
 * What a notification says, built where the event happens and stored with it
 * in the outbox: the Standard Webhooks body without its links (those depend
 * on the channel and on PUBLIC_URL, and are added when it is sent).
 */
import type { LadderRow } from '../../sql/cueLadders.ts'

/** Every event a channel may listen for (the NotificationEvent enum). */
export const NOTIFICATION_EVENTS = [
  'CUE_WAITING',
  'CUE_REMINDER',
  'CUE_ESCALATED',
  'CUE_TIMED_OUT',
  'CUE_ANSWERED',
  'RUN_FAILED',
  'RUN_MISSED',
  'RUN_DEGRADED',
  'RUN_LATE_START',
  'RUN_COMPLETED',
  'TEST',
] as const
export type NotificationEventName = (typeof NOTIFICATION_EVENTS)[number]

export const CUE_EVENTS: readonly NotificationEventName[] = [
  'CUE_WAITING',
  'CUE_REMINDER',
  'CUE_ESCALATED',
  'CUE_TIMED_OUT',
  'CUE_ANSWERED',
]

/** `CUE_TIMED_OUT` → `cue.timed_out`: the body's `type`. */
export function eventType(event: NotificationEventName): string {
  const lower = event.toLowerCase()
  const i = lower.indexOf('_')
  return i < 0 ? lower : `${lower.slice(0, i)}.${lower.slice(i + 1)}`
}

/** The run as a notification describes it. */
export interface RunSummary {
  id: number
  definitionId: number
  definitionSlug: string
  definitionTitle: string
  scope: string
  scheduledFor: Date
  rehearsal: boolean
  status?: string
  health?: string
  error?: string | null
}

export function runPart(run: RunSummary): Record<string, unknown> {
  return {
    id: String(run.id),
    definition: { id: String(run.definitionId), slug: run.definitionSlug, title: run.definitionTitle },
    scope: run.scope,
    scheduledFor: run.scheduledFor.toISOString(),
    rehearsal: run.rehearsal,
    ...(run.status === undefined ? {} : { status: run.status.toUpperCase() }),
    ...(run.health === undefined ? {} : { health: run.health.toUpperCase() }),
    ...(run.error ? { error: run.error } : {}),
  }
}

export function cuePart(l: LadderRow): Record<string, unknown> {
  return {
    prompt: l.prompt,
    openedAt: l.openedAt.toISOString(),
    deadlineAt: l.deadlineAt?.toISOString() ?? null,
    assignees: l.assignees,
    exclusive: l.exclusive,
    escalationLevel: l.escalationLevel,
    remindersSent: l.remindersSent,
    answer: l.answer
      ? {
          outcome: l.answer.outcome,
          by: l.answer.by,
          via: l.answer.via,
          at: l.answer.at.toISOString(),
          note: l.answer.note,
        }
      : null,
  }
}

/** The stored body of an event (its `id` and `links` are added by the outbox and the sender). */
export function body(
  event: NotificationEventName,
  occurredAt: Date,
  parts: { run?: RunSummary | null; stepId?: number | null; ladder?: LadderRow | null },
): Record<string, unknown> {
  return {
    type: eventType(event),
    event,
    occurredAt: occurredAt.toISOString(),
    run: parts.run ? runPart(parts.run) : null,
    step: parts.stepId ? { id: String(parts.stepId), kind: 'core.cue' } : null,
    cue: parts.ladder ? cuePart(parts.ladder) : null,
  }
}

/** The team names among a cue's assignees (`team:ops` → `ops`): what a channel's `teams` narrows on. */
export function teamsOf(assignees: readonly string[]): string[] {
  return assignees.filter((a) => a.startsWith('team:')).map((a) => a.slice('team:'.length))
}
