-- idx_evrun_ended_health (ended_at, health) goes: it was one of the five
-- secondary indexes the start of every run rewrites (ended_at is stamped as a
-- run ends), a delete-mark and an insert per run and a purge after, for reads
-- that other indexes serve.
--
-- * The runs-by-status counts read "terminal runs that ended after a mark".
--   They now read the range `updated_at > mark` of idx_evrun_updated and check
--   `ended_at` on the rows: every statement that stamps `ended_at` stamps
--   `updated_at` too (ON UPDATE, with the same NOW(3)), and nothing ever sets
--   `updated_at` back, so a run that ended after the mark was also updated
--   after it. The range holds, beside them, the runs made or moved since the
--   mark, which the old index did not.
--
-- * The live degraded runs are an index of their own, on a virtual column
--   that is 1 for a degraded run not yet ended and NULL for every other run.
--   Every run has its entry from its INSERT (NULL), and it changes only when
--   a run is degraded and when a degraded run ends: a run's start, steps and
--   end otherwise leave it as it is (InnoDB compares a virtual column's value
--   before and after and writes no entry when it is unchanged).
--
-- Guarded (IF EXISTS / IF NOT EXISTS), so a migrator killed halfway can run
-- the file again.
ALTER TABLE event_runs ADD COLUMN IF NOT EXISTS degraded_live TINYINT
  AS (IF(health = 'degraded' AND ended_at IS NULL, 1, NULL)) VIRTUAL
;;
ALTER TABLE event_runs ADD INDEX IF NOT EXISTS idx_evrun_degraded_live (degraded_live)
;;
ALTER TABLE event_runs DROP INDEX IF EXISTS idx_evrun_ended_health
