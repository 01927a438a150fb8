-- A pause holds the show's time. `paused_at` is the instant a run was paused
-- (NULL whenever it is not paused); at resume, the run's current wait and cue
-- (the step's start and wake time, the ladder's opening and deadline) move
-- later by the time it spent paused, in the same transaction as the move back
-- to running, so any instance, after any restart, resumes with exactly the
-- time that was left. Nothing reads it while the run is paused: it costs no
-- query while idle. Guarded (IF NOT EXISTS) so a migrator killed halfway can
-- run the file again.
ALTER TABLE event_runs ADD COLUMN IF NOT EXISTS paused_at DATETIME(3) NULL
;;
