-- The foreign keys from a run's own rows to the run go: fk_evstep_run and
-- fk_evlog_run (to event_runs), fk_cueladder_step and fk_cuelink_step (to
-- event_run_steps), all ON DELETE CASCADE. Each INSERT of a step row, a log
-- line, a ladder or a link looked its parent up in the parent's primary key
-- and took a shared lock on that row, in the start transaction among others
-- (two per single-step run), and every delete of runs ran InnoDB's cascade
-- row by row under the parent's statement. graphile-worker's jobs table has
-- no such key either.
--
-- What the cascade gave is now the deleters' job: every statement that
-- deletes runs deletes their rows first, children before parents
-- (sql/eventRuns/children.ts), so a delete cut short leaves runs without some
-- of their rows, never a row without its run. Every writer of a child row
-- writes it for a run (or step) it has just made, holds, or read live.
--
-- The indexes stay: uq_evstep_run_seq (run_id first), idx_evlog_run,
-- idx_cueladder_run and idx_cuelink_step are read by the run page, the
-- deletes and the cue paths; InnoDB made none of its own for these keys.
--
-- Guarded (IF EXISTS), so a migrator killed halfway can run the file again.
ALTER TABLE event_run_steps DROP FOREIGN KEY IF EXISTS fk_evstep_run
;;
ALTER TABLE event_run_logs DROP FOREIGN KEY IF EXISTS fk_evlog_run
;;
ALTER TABLE cue_ladders DROP FOREIGN KEY IF EXISTS fk_cueladder_step
;;
ALTER TABLE cue_links DROP FOREIGN KEY IF EXISTS fk_cuelink_step
