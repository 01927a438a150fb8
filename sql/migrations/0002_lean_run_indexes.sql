-- Two event_runs indexes that no query needed, each written again whenever a
-- run changes status:
--
-- * idx_evrun_concurrency (concurrency_key, status): who holds a key is read
--   from concurrency_locks, the row that decides it (a lock row per key, taken
--   with the claim), joined to the holder's run. Every run, key-less ones
--   included, paid for this index on each status move.
-- * idx_evrun_ended (status, ended_at): the retention sweep filters on
--   COALESCE(ended_at, updated_at), which no index range serves.
--
-- Completing a run now rewrites two secondary index entries instead of four.
-- DROP INDEX IF EXISTS, so a migrator killed halfway can run the file again.

ALTER TABLE event_runs DROP INDEX IF EXISTS idx_evrun_concurrency
;;

ALTER TABLE event_runs DROP INDEX IF EXISTS idx_evrun_ended
