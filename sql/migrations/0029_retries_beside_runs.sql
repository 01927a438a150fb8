-- uq_evrun_retry_of goes: "one retry per original run" is kept by a table of
-- its own, event_run_retries, written only by a retry. The unique index held
-- an entry for every run, NULL for all but retries, so every new run wrote
-- one (1 of the 25 index entries a single-step run cost, bench/writesPerRun.ts)
-- to guard a row that retries alone make. A retry now writes one row here in
-- its own transaction; a second retry of the same original meets the primary
-- key (DUP_ENTRY), as it met the unique index. event_runs.retry_of stays, for
-- reading which run a retry retries.
--
-- No foreign keys (as for a run's other rows since 0024): whatever deletes
-- runs deletes their rows here first, as original or as retry
-- (sql/eventRuns/children.ts). Deleting the retry frees its original to be
-- retried again, as the unique index's entry going with the run did.
--
-- Guarded (IF NOT EXISTS, INSERT IGNORE, IF EXISTS), so a migrator killed
-- halfway can run the file again; the copy reads the old index while it is
-- there.
CREATE TABLE IF NOT EXISTS event_run_retries (
  original_id BIGINT UNSIGNED NOT NULL,
  run_id      BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (original_id),
  -- The delete of a retry run finds its row by the retry.
  KEY idx_evretry_run (run_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;
INSERT IGNORE INTO event_run_retries (original_id, run_id)
  SELECT retry_of, id FROM event_runs WHERE retry_of IS NOT NULL
;;
ALTER TABLE event_runs DROP INDEX IF EXISTS uq_evrun_retry_of
