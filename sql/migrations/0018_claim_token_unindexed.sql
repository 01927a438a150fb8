-- Two event_runs indexes that no query plan uses go, each written for every
-- new run (bench/writesPerRun.ts counts them).
--
-- * idx_evrun_claim_token: a hot column kept out of a secondary index that a
--   narrower read does not need. claim_token changes whenever a run is
--   claimed or given back (a start that hands a run on, every lease of
--   in-flight runs, every release), so each of those moves rewrote an entry
--   of this index (a delete-mark and an insert, and the purge of the old entry
--   later), and every new run wrote one (NULL). Its one reader was the second
--   half of "lease many, read what you leased" (claimTickBatch), and that
--   lease also sets every leased run's wake_at to the one lease expiry it
--   names: the read is now the range `wake_at = that expiry` of
--   idx_evrun_wake, filtered on the token (sql/eventRuns/claims.ts).
--
-- * fk_evrun_version, the foreign key on version_id and the index InnoDB made
--   for it: no statement reads runs by version, and versions are never
--   deleted, so the constraint only cost every new run an index entry and a
--   lookup (with a shared lock) of its version's row. A run's version_id is
--   always its definition's current_version_id, read in the statement's own
--   code path (materialisation, startRun, backfill, retry). The foreign key to
--   the definition stays: its index is the unique occurrence key's prefix.
--
-- Guarded (IF EXISTS), so a migrator killed halfway can run the file again.
ALTER TABLE event_runs DROP INDEX IF EXISTS idx_evrun_claim_token
;;
ALTER TABLE event_runs DROP FOREIGN KEY IF EXISTS fk_evrun_version
;;
ALTER TABLE event_runs DROP INDEX IF EXISTS fk_evrun_version
