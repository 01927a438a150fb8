/**
 * EMAIL deliveries: a plain-text mail through the server SMTP_URL names, with
 * the same headline and links as the other kinds. The channel's target is
 * one or more addresses; the mail server is this instance's configuration,
 * never a channel's, so a channel cannot make this process dial anywhere new.
 */
import nodemailer from 'nodemailer'
import { DeliveryError, headline, linkLines, type Outgoing } from './senders.ts'

/** The text of a notification mail. */
export function mailText(body: Record<string, unknown>): string {
  const lines = [headline(body), '']
  const run = body.run as { id?: string; scheduledFor?: string; status?: string; error?: string } | null
  const cue = body.cue as {
    prompt?: string
    deadlineAt?: string | null
    answer?: { outcome: string; by: string; via: string } | null
  } | null
  if (run?.id) lines.push(`Run: ${run.id}${run.scheduledFor ? `, scheduled for ${run.scheduledFor}` : ''}`)
  if (run?.status) lines.push(`Status: ${run.status}`)
  if (run?.error) lines.push(`Error: ${run.error}`)
  if (cue?.prompt) lines.push(`Cue: ${cue.prompt}`)
  if (cue?.deadlineAt) lines.push(`Deadline: ${cue.deadlineAt}`)
  if (cue?.answer) lines.push(`Answered: ${cue.answer.outcome} by ${cue.answer.by} (${cue.answer.via})`)
  const links = linkLines(body)
  if (links.length > 0) lines.push('', ...links)
  lines.push('', `Event ${String(body.id)} (${String(body.type)}) at ${String(body.occurredAt)}`)
  return `${lines.join('\n')}\n`
}

export function emailSender(smtpUrl: string, from: string): (out: Outgoing) => Promise<void> {
  const transport = nodemailer.createTransport(smtpUrl)
  return async (out) => {
    try {
      await transport.sendMail({
        from,
        to: out.channel.target,
        subject: headline(out.body),
        text: mailText(out.body),
        headers: { 'X-Showrunner-Event-Id': out.eventId },
      })
    } catch (err) {
      const e = err as { responseCode?: number; code?: string; message?: string }
      // 5xx from the server is a refusal that will not change by itself; anything else is retried.
      const permanent = typeof e.responseCode === 'number' && e.responseCode >= 500
      throw new DeliveryError(
        `mail to ${out.channel.target} failed: ${e.code ?? ''} ${e.message ?? String(err)}`.trim(),
        !permanent,
      )
    }
  }
}
