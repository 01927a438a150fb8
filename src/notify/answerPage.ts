/**
 * The answer page behind an answer link (`GET /answer/TOKEN`): the cue's
 * prompt and two buttons, Resolve and Skip, as a plain HTML form, so it works
 * on any phone with no script and nothing loaded from elsewhere. Its POST
 * spends the link (one answer per link) and answers the cue `via: link`,
 * recorded under the channel's name, with the same race rules as the API.
 */

import { createHash } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import * as ladders from '../../sql/cueLadders.ts'
import type { Db } from '../../sql/db.ts'
import * as runs from '../../sql/eventRuns/index.ts'
import * as steps from '../../sql/eventSteps/index.ts'
import * as links from '../../sql/notifications/cueLinks.ts'
import { AppError } from '../errors.ts'
import type { Logger } from '../log.ts'
import { answerCue } from '../operations/cueAnswers.ts'
import type { Clock } from '../runner/clock.ts'
import type { RunHandOff } from '../runner/handOff.ts'
import { ANSWER_PATH, digestOf, TOKEN_PATTERN } from './answerLinks.ts'

const STYLE = `body{font:16px/1.5 system-ui,sans-serif;margin:0;padding:1rem;background:#f6f6f4;color:#1d1d1b}
main{max-width:32rem;margin:0 auto;background:#fff;border-radius:.5rem;padding:1.25rem;box-shadow:0 1px 3px #0002}
h1{font-size:1.25rem;margin:0 0 .5rem}p{margin:.5rem 0}.meta{color:#555;font-size:.9rem}
textarea{width:100%;box-sizing:border-box;font:inherit;min-height:4rem;margin:.5rem 0}
.actions{display:flex;gap:.75rem;flex-wrap:wrap}button{flex:1 1 8rem;font:inherit;font-weight:600;padding:.9rem;border-radius:.4rem;border:0;cursor:pointer}
.resolve{background:#1f6f3f;color:#fff}.skip{background:#e4e4e0;color:#1d1d1b}`

const STYLE_HASH = createHash('sha256').update(STYLE).digest('base64')

/** Nothing but this page's own inline style; forms post back here only; never framed; no referrer (the URL is a capability). */
const HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'content-security-policy': `default-src 'none'; style-src 'sha256-${STYLE_HASH}'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'`,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'x-robots-tag': 'noindex',
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
}

function html(title: string, inner: string): string {
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title><style>${STYLE}</style></head>
<body><main>${inner}</main></body>
</html>
`
}

function reply(res: ServerResponse, status: number, title: string, message: string): void {
  res.writeHead(status, HEADERS)
  res.end(html(title, `<h1>${escapeHtml(title)}</h1><p>${escapeHtml(message)}</p>`))
}

export interface AnswerPageDeps {
  db: Db
  clock: Clock
  nudge?: () => void
  /** The co-hosted runner, to which an answer hands its run (src/runner/handOff.ts). */
  handOff?: RunHandOff
  logger?: Pick<Logger, 'warn'>
}

/** Largest form body read. */
const MAX_FORM_BYTES = 4096

function readForm(req: IncomingMessage): Promise<URLSearchParams | null> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size > MAX_FORM_BYTES) {
        resolve(null)
        req.destroy()
      } else chunks.push(c)
    })
    req.on('end', () => resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))))
    req.on('error', () => resolve(null))
  })
}

/** Why a cue can no longer be answered, or null while it waits. */
async function closedReason(db: Db, stepId: number): Promise<string | null> {
  const [step, ladder] = await Promise.all([steps.getById(db, stepId), ladders.get(db, stepId)])
  if (!step) return 'This cue no longer exists.'
  if (ladder?.answer) {
    const how =
      ladder.answer.outcome === 'timedOut' ? 'timed out' : `${ladder.answer.outcome} by ${ladder.answer.by}`
    return `This cue is closed: ${how} at ${ladder.answer.at.toISOString()}.`
  }
  if (!(step.status === 'running' && step.parked)) return `This cue is closed (the step is ${step.status}).`
  return null
}

export function isAnswerPath(pathname: string): boolean {
  return pathname.startsWith(ANSWER_PATH)
}

export function createAnswerPageHandler(deps: AnswerPageDeps) {
  return async function handleAnswerPage(
    req: IncomingMessage,
    res: ServerResponse,
    pathname: string,
  ): Promise<void> {
    const token = pathname.slice(ANSWER_PATH.length)
    if (req.method !== 'GET' && req.method !== 'HEAD' && req.method !== 'POST') {
      res.writeHead(405, { ...HEADERS, allow: 'GET, HEAD, POST' })
      res.end(html('Not allowed', '<p>Open this link in a browser.</p>'))
      return
    }
    const link = TOKEN_PATTERN.test(token) ? await links.find(deps.db, digestOf(token)) : null
    if (!link)
      return reply(res, 404, 'Link not valid', 'This answer link is not valid. Use the console instead.')
    if (link.usedAt)
      return reply(
        res,
        410,
        'Link already used',
        'This answer link was used already; each link answers once.',
      )
    const closed = await closedReason(deps.db, link.stepId)
    if (closed) return reply(res, 410, 'Cue closed', closed)
    if (req.method === 'POST') return answer(req, res, token, link)
    const step = await steps.getById(deps.db, link.stepId)
    const ladder = await ladders.get(deps.db, link.stepId)
    const run = step ? await runs.getById(deps.db, step.runId) : null
    const title = ladder?.prompt ?? 'A cue is waiting'
    const meta = [
      run ? `${run.definitionTitle}${run.scope ? ` (${run.scope})` : ''}, run ${run.id}` : null,
      ladder && ladder.assignees.length > 0 ? `For ${ladder.assignees.join(', ')}` : null,
      ladder?.deadlineAt ? `Deadline ${ladder.deadlineAt.toISOString()}` : null,
    ].filter((x): x is string => x !== null)
    res.writeHead(200, HEADERS)
    res.end(
      req.method === 'HEAD'
        ? undefined
        : html(
            title,
            `<h1>${escapeHtml(title)}</h1>${meta.map((m) => `<p class="meta">${escapeHtml(m)}</p>`).join('')}
<form method="post" action="${ANSWER_PATH}${token}">
<label for="note">Note (optional)</label>
<textarea id="note" name="note" maxlength="1000"></textarea>
<div class="actions"><button class="resolve" name="outcome" value="resolved">Resolve</button>
<button class="skip" name="outcome" value="skipped">Skip</button></div>
</form>`,
          ),
    )
  }

  async function answer(
    req: IncomingMessage,
    res: ServerResponse,
    token: string,
    link: links.CueLinkRow,
  ): Promise<void> {
    const form = await readForm(req)
    const outcome = form?.get('outcome')
    if (!form || (outcome !== 'resolved' && outcome !== 'skipped'))
      return reply(res, 400, 'Choose an answer', 'Use the Resolve or Skip button.')
    const note = (form.get('note') ?? '').trim().slice(0, 1000) || null
    if (!(await links.use(deps.db, digestOf(token))))
      return reply(
        res,
        410,
        'Link already used',
        'This answer link was used already; each link answers once.',
      )
    try {
      const answered = await answerCue(
        { db: deps.db, clock: deps.clock, nudge: deps.nudge, handOff: deps.handOff },
        {
          stepId: link.stepId,
          // The link is the capability: whoever holds it answers for the channel it was sent to.
          person: { name: `answer link of ${link.channelName}`, teams: [], admin: true },
          outcome,
          via: 'link',
          text: note,
          by: link.channelName,
        },
      )
      if (answered.applied) return reply(res, 200, 'Thank you', `The cue is ${outcome}.`)
      return reply(
        res,
        409,
        'Not applied',
        (await closedReason(deps.db, link.stepId)) ?? 'The cue was not waiting.',
      )
    } catch (err) {
      if (err instanceof AppError) return reply(res, 409, 'Not applied', err.message)
      throw err
    }
  }
}
