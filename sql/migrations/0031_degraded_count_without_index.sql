-- idx_evrun_degraded_live and its virtual column go: every run wrote an entry
-- in it at its INSERT (NULL for all but the degraded live runs), one of the
-- ten a new run writes, for one count that a scrape reads every few seconds.
--
-- A run is degraded only by a failed attempt of one of its steps, and a run
-- has steps only once it has started: a degraded run that has not ended is
-- starting, running, paused or ending, never scheduled. So the count reads
-- the in-flight ranges of idx_evrun_due (status, scheduled_for), the ranges
-- the runs-by-status counts already read, and checks `health` on each row:
-- rows read grow with the runs in flight, not with the history or the runs
-- made ahead, and with nothing in flight it reads nothing.
--
-- Guarded (IF EXISTS), so a migrator killed halfway can run the file again.
ALTER TABLE event_runs DROP INDEX IF EXISTS idx_evrun_degraded_live
;;
ALTER TABLE event_runs DROP COLUMN IF EXISTS degraded_live
