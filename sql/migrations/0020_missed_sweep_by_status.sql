-- The missed sweep reads the scheduled runs of idx_evrun_due instead of an
-- index of its own, so idx_evrun_missed goes: every new run wrote an entry of
-- it and every start rewrote that entry (missed_at to NULL: a delete-mark, an
-- insert, and the purge later), 3 of the 32 index entries a single-step run
-- cost (bench/writesPerRun.ts).
--
-- A run becomes missed at missed_at = scheduled_for + its definition's grace,
-- so no run is missed before scheduled_for + the smallest grace of any
-- definition. The sweep (findMissed, sql/eventRuns/due.ts) reads the range
-- status = 'scheduled' AND scheduled_for < now - that smallest grace, and
-- checks missed_at on the rows: runs waiting within the smallest grace, and
-- every run ahead, are outside the range. idx_evdef_grace answers the smallest
-- grace from its first entry (definitions are few and rarely written, so the
-- index costs them nothing that matters).
--
-- Guarded (IF EXISTS / IF NOT EXISTS), so a migrator killed halfway can run
-- the file again.
ALTER TABLE event_definitions ADD INDEX IF NOT EXISTS idx_evdef_grace (grace_seconds)
;;
ALTER TABLE event_runs DROP INDEX IF EXISTS idx_evrun_missed
