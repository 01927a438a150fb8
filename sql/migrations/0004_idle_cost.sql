-- What an idle tick, a scrape and the `health` query read must not grow with
-- the history of finished runs, nor with the runs scheduled ahead.
--
-- * missed_at: the instant a scheduled run becomes missed (scheduled_for plus
--   its definition's grace), stamped when the run is made, re-stamped for a
--   definition's scheduled runs when its grace changes, and set to NULL by
--   every move out of `scheduled`. So idx_evrun_missed holds only runs still
--   waiting to start, and the missed sweep reads the range `missed_at < now`:
--   exactly the runs it marks. The old sweep added each definition's grace to
--   scheduled_for, which no index range serves, and read every run of every
--   definition on every tick. The start claim checks the same column, so the
--   two never disagree about a run at its grace boundary. Only two writes of
--   this index per run: its insert, and the move out of `scheduled`.
--
-- * idx_evrun_ended_health (ended_at, health): ended_at is stamped once, when a
--   run reaches a terminal status, and never changes again. Runs that ended
--   recently are a range of it (how runs-by-status keeps its terminal counts
--   without counting the history again), and live degraded runs are the range
--   (NULL, 'degraded'), whatever the number of runs finished or scheduled.
--
-- Every statement is guarded, so a migrator killed halfway can run it again.

ALTER TABLE event_runs ADD COLUMN IF NOT EXISTS missed_at DATETIME(3) NULL AFTER wake_at
;;

ALTER TABLE event_runs ADD INDEX IF NOT EXISTS idx_evrun_missed (missed_at)
;;

ALTER TABLE event_runs ADD INDEX IF NOT EXISTS idx_evrun_ended_health (ended_at, health)
;;

-- Runs made before this migration. updated_at = updated_at keeps the column's
-- ON UPDATE stamp from rewriting when each run last changed.
UPDATE event_runs r JOIN event_definitions d ON d.id = r.definition_id
   SET r.missed_at = r.scheduled_for + INTERVAL d.grace_seconds SECOND, r.updated_at = r.updated_at
 WHERE r.status = 'scheduled' AND r.missed_at IS NULL
;;

-- Every terminal run carries ended_at (the counts above rely on it); rows that
-- ended before it was always stamped take their last change as its value.
UPDATE event_runs SET ended_at = updated_at, updated_at = updated_at
 WHERE status IN ('completed', 'cancelled', 'failed', 'missed') AND ended_at IS NULL
