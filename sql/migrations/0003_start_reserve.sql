-- Room in each new run's row for what its start writes, released by the start.
--
-- Leaving `scheduled` fills columns that were NULL (started_at, current_phase,
-- and ended_at or the claim), so the row grows. InnoDB cannot rewrite a grown
-- row in its own slot: it appends it to the page's free space and, once that is
-- used up, reorganises the whole page. Runs are materialised ahead in
-- sequence, into pages filled to 15/16, so starting a batch of them
-- reorganised a page every few rows (about a third of the start UPDATE's
-- MariaDB time, and page latches held meanwhile).
--
-- A new row now carries 48 reserved bytes (the DEFAULT, so no INSERT names
-- the column), and every status move sets them to NULL in the same UPDATE: a
-- start that fills up to 48 bytes leaves the row no larger, and InnoDB rewrites
-- it in place. 48 bytes cover finishing at once (phase, both timestamps) and a
-- keyed claim (owner, lease, start time); a start that also stamps a claim
-- token grows by the rest, as before. Nothing reads the column.

ALTER TABLE event_runs
  ADD COLUMN IF NOT EXISTS start_reserve VARBINARY(48) NULL
    DEFAULT 0x000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000
