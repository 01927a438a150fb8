-- A counter on each definition that everything creating runs under it, and
-- archiving it, increments in its own transaction.
--
-- Archiving is refused while the definition has runs that are not finished,
-- and nothing may add a run to an archived definition. On one server a shared
-- row lock (creators) against an exclusive one (archive) kept the two apart.
-- On a Galera cluster row locks hold only on the node that took them, so a
-- run created through one node and an archive through another could both
-- commit. Writing the same row makes the two conflict everywhere: on one
-- server the second waits for the first; across nodes the second loses at
-- COMMIT and runs again, then sees what the first did. Nothing reads the value.

ALTER TABLE event_definitions
  ADD COLUMN IF NOT EXISTS run_guard BIGINT UNSIGNED NOT NULL DEFAULT 0
;;

-- Set when a person wakes a run (a cue answered, a step skipped) while an
-- instance holds it, and cleared when that instance releases it: the release
-- then keeps the person's earlier wake time instead of writing its own plan,
-- made before the person acted (a cue answered while its runner was parking it
-- would otherwise sleep until the cue's timeout). A flag rather than a
-- comparison of times, because due times and leases follow different clocks.

ALTER TABLE event_runs
  ADD COLUMN IF NOT EXISTS woken_while_claimed TINYINT(1) NOT NULL DEFAULT 0
