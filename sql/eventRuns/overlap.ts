/**
 * Overlap policies, decided inside the start claim's transaction: when an
 * occurrence comes due while an earlier run of the same definition and scope
 * is in progress, a lock row per (definition, scope) decides, so two instances
 * can never both conclude that no earlier run is in progress.
 */
import type { Queryable } from '../db.ts'
import { placeholders } from '../json.ts'
import { KEY_HOLDING } from '../states.ts'
import type { Raw } from './rows.ts'
import { alertStatementsFor, releaseKey, sendTogether, transitionSets } from './transitions.ts'
/** What an overlap policy decided for a run that came due while an earlier one of its scope was in progress. */
export type OverlapOutcome =
  /** SKIP: the run is now `missed`. */
  | { outcome: 'skipped'; holderId: number }
  /** BUFFER_ONE: the run is held (grace exempt) until the holder ends; `supersededId` went `missed` for it. */
  | { outcome: 'held'; holderId: number; supersededId: number | null }
  /** BUFFER_ONE: a newer occurrence is already held, so this older one is now `missed`. */
  | { outcome: 'superseded'; holderId: number; heldId: number }
  /** CANCEL_OTHER: the holder was cancelled and this run claimed. */
  | { outcome: 'cancelled'; cancelledId: number }

export interface OverlapCandidate {
  id: number
  definitionId: number
  scope?: string
  scheduledFor?: Date
  overlap: 'skip' | 'buffer_one' | 'cancel_other'
}

/**
 * The overlap policy's decision for `run`, made under its (definition, scope)
 * lock row (inserted, or locked FOR UPDATE), so two instances can never both
 * decide that no earlier run is in progress. Null = the scope is free and the
 * lock is now `run`'s (the claim may go on); `cancelled` = the holder was
 * cancelled (CANCEL_OTHER) and the lock is `run`'s; anything else is final for
 * this attempt and commits as it is.
 */
export async function takeOverlap(tx: Queryable, run: OverlapCandidate): Promise<OverlapOutcome | null> {
  const scope = run.scope ?? ''
  const where = 'definition_id = ? AND scope = ?'
  let holderId: number | null = null
  let heldId: number | null = null
  const ins = await tx.run(
    'INSERT IGNORE INTO overlap_locks (definition_id, scope, run_id) VALUES (?, ?, ?)',
    [run.definitionId, scope, run.id],
  )
  if (ins.affectedRows === 1) {
    // The first run of this scope under a policy: one that started before the
    // policy applied (on the set-wise path, without this lock) may be in progress.
    const [other] = await tx.execute<Raw>(
      `SELECT id FROM event_runs WHERE definition_id = ? AND scope = ? AND rehearsal = 0 AND id <> ?
          AND status IN (${placeholders(KEY_HOLDING.length)}) LIMIT 1`,
      [run.definitionId, scope, run.id, ...KEY_HOLDING],
    )
    if (other) {
      holderId = Number(other.id)
      await tx.run(`UPDATE overlap_locks SET run_id = ? WHERE ${where}`, [holderId, run.definitionId, scope])
    }
  } else {
    const [lock] = await tx.execute<Raw>(
      `SELECT run_id, held_run_id FROM overlap_locks WHERE ${where} FOR UPDATE`,
      [run.definitionId, scope],
    )
    if (!lock) throw new ClaimLost()
    heldId = lock.held_run_id == null ? null : Number(lock.held_run_id)
    const recorded = Number(lock.run_id)
    if (recorded !== run.id && (await inProgress(tx, recorded))) holderId = recorded
  }

  if (holderId === null) {
    // Free. An occurrence BUFFER_ONE held while the scope was busy goes first:
    // this one waits for it, then meets it in progress.
    if (heldId !== null && heldId !== run.id) {
      const [held] = await tx.execute<Raw>('SELECT status FROM event_runs WHERE id = ?', [heldId])
      if (held && String(held.status) === 'scheduled')
        return { outcome: 'held', holderId: heldId, supersededId: null }
    }
    await tx.run(
      `UPDATE overlap_locks SET run_id = ?, held_run_id = NULL, acquired_at = NOW(3) WHERE ${where}`,
      [run.id, run.definitionId, scope],
    )
    return null
  }

  switch (run.overlap) {
    case 'skip': {
      await moveScheduled(
        tx,
        run.id,
        'missed',
        `skipped: run ${holderId} of this definition and scope was still in progress (overlap policy SKIP)`,
      )
      return { outcome: 'skipped', holderId }
    }
    case 'buffer_one': {
      if (heldId === run.id) return { outcome: 'held', holderId, supersededId: null }
      let supersededId: number | null = null
      if (heldId !== null) {
        const [held] = await tx.execute<Raw>('SELECT status, scheduled_for FROM event_runs WHERE id = ?', [
          heldId,
        ])
        if (held && String(held.status) === 'scheduled') {
          const heldFor = (held.scheduled_for as Date).getTime()
          if (run.scheduledFor && run.scheduledFor.getTime() < heldFor) {
            // A newer occurrence is already held: this older one gives way.
            await moveScheduled(
              tx,
              run.id,
              'missed',
              `superseded: newer run ${heldId} is held until run ${holderId} ends (overlap policy BUFFER_ONE)`,
            )
            return { outcome: 'superseded', holderId, heldId }
          }
          await moveScheduled(
            tx,
            heldId,
            'missed',
            `superseded: newer run ${run.id} came due while run ${holderId} was still in progress (overlap policy BUFFER_ONE)`,
          )
          supersededId = heldId
        }
      }
      // Held: its grace window does not run while it waits (no missed_at: the sweep never sees it).
      await tx.run(
        `UPDATE event_runs SET grace_exempt = 1, missed_at = NULL WHERE id = ? AND status = 'scheduled'`,
        [run.id],
      )
      await tx.run(`UPDATE overlap_locks SET held_run_id = ? WHERE ${where}`, [
        run.id,
        run.definitionId,
        scope,
      ])
      return { outcome: 'held', holderId, supersededId }
    }
    case 'cancel_other': {
      const { sets, args } = transitionSets('cancelled', {
        error: `cancelled: newer run ${run.id} of this definition and scope came due (overlap policy CANCEL_OTHER)`,
      })
      await tx.run(
        `UPDATE event_runs SET ${sets.join(', ')} WHERE id = ? AND status IN (${placeholders(KEY_HOLDING.length)})`,
        [...args, holderId, ...KEY_HOLDING],
      )
      await tx.run(
        `UPDATE event_run_steps
            SET status = 'cancelled', ended_at = NOW(3), parked = 0, wake_at = NULL,
                claimed_by = NULL, claim_expires_at = NULL
          WHERE run_id = ? AND status IN ('pending','running')`,
        [holderId],
      )
      await releaseKey(tx, [holderId])
      await tx.run(
        `UPDATE overlap_locks SET run_id = ?, held_run_id = NULL, acquired_at = NOW(3) WHERE ${where}`,
        [run.id, run.definitionId, scope],
      )
      return { outcome: 'cancelled', cancelledId: holderId }
    }
  }
}

/** A guarded `scheduled → to` inside the claim's transaction. */
async function moveScheduled(tx: Queryable, id: number, to: 'missed', error: string): Promise<void> {
  const { sets, args, owed } = transitionSets(to, { error })
  await sendTogether(tx, [
    {
      sql: `UPDATE event_runs SET ${sets.join(', ')} WHERE id = ? AND status = 'scheduled'`,
      params: [...args, id],
    },
    ...alertStatementsFor(owed, [id]),
  ])
}

/** A claim that found its run moved on (or its lock row gone): nothing of it may stay. */
export class ClaimLost extends Error {}

/** Whether a run is in progress (holds its key and its overlap lock). */
export async function inProgress(tx: Queryable, runId: number): Promise<boolean> {
  const [row] = await tx.execute<Raw>('SELECT status FROM event_runs WHERE id = ?', [runId])
  return row !== undefined && (KEY_HOLDING as readonly string[]).includes(String(row.status))
}
