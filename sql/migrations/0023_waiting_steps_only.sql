-- idx_evstep_waiting (parked, status, started_at) held every step, so every
-- step's begin (pending -> running, started_at stamped) and end (running ->
-- completed) rewrote its entry: a delete-mark and an insert each, and the
-- purge later, 4 index writes per step of a run that is handed on (a
-- webhook's), for an index whose readers want the steps parked on a person
-- and nothing else.
--
-- waiting_since is a virtual column, NULL unless the step waits on a person
-- (running and parked), then the instant it began. Indexed, it holds every
-- step as NULL but changes only when a step parks or is answered: a begin or
-- an end of any other step leaves the entry as it is (InnoDB compares a
-- virtual column's value before and after, and an unchanged one rewrites no
-- entry). The inbox (listWaiting, oldest first) and the waiting count read
-- its range `waiting_since IS NOT NULL`, in its own order.
--
-- Guarded (IF EXISTS / IF NOT EXISTS), so a migrator killed halfway can run
-- the file again.
ALTER TABLE event_run_steps ADD COLUMN IF NOT EXISTS waiting_since DATETIME(3)
  AS (IF(parked = 1 AND status = 'running', started_at, NULL)) VIRTUAL
;;
ALTER TABLE event_run_steps ADD INDEX IF NOT EXISTS idx_evstep_waiting_since (waiting_since)
;;
ALTER TABLE event_run_steps DROP INDEX IF EXISTS idx_evstep_waiting
