-- Keyed scheduled runs get an index of their own, so the runner finds the due
-- ones without paging through every due run.
--
-- A run with a concurrency key is started by its own claim (its key lock is
-- taken in the same transaction), not by the batch start of key-less runs. It
-- used to be picked from a page of all due runs, oldest first: behind a large
-- key-less backlog the page held none of them, and a keyed run whose key was
-- free could wait past its grace window and be marked missed.
--
-- Runs under an overlap policy (`overlap` NOT NULL) start the same way, under
-- their (definition, scope) lock, so they are in this index too.
--
-- `keyed_due_at` is `wake_at` for a scheduled run with a key or an overlap
-- policy and NULL for every other run. VIRTUAL: the row does not grow; only the index stores it, and a
-- key-less run's entry (NULL) never changes, so its status moves and wake-ups
-- cost this index nothing. `ADD ... IF NOT EXISTS`, so a migrator killed
-- halfway can run the file again.

ALTER TABLE event_runs
  ADD COLUMN IF NOT EXISTS keyed_due_at DATETIME(3)
    AS (IF(status = 'scheduled' AND (concurrency_key IS NOT NULL OR overlap IS NOT NULL), wake_at, NULL)) VIRTUAL
;;

ALTER TABLE event_runs ADD INDEX IF NOT EXISTS idx_evrun_keyed_due (keyed_due_at)
