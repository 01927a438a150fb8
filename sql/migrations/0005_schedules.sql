-- Schedules as operators expect them: overlap policies, time bounds, backfill,
-- and materialisation that is bounded per (definition, scope) and never skips
-- an instant. Every statement is guarded (IF NOT EXISTS), because MariaDB
-- commits DDL implicitly and a migrator killed halfway must be able to run the
-- file again.

-- What happens when an occurrence comes due while an earlier run of the same
-- definition and scope is in progress, and the instants the schedule is
-- bounded by (inclusive; NULL = unbounded).
ALTER TABLE event_definitions
  ADD COLUMN IF NOT EXISTS overlap ENUM('allow_all','skip','buffer_one','cancel_other') NOT NULL DEFAULT 'allow_all',
  ADD COLUMN IF NOT EXISTS starts_at DATETIME(3) NULL,
  ADD COLUMN IF NOT EXISTS ends_at DATETIME(3) NULL
;;

-- On each run: the overlap policy it starts under (NULL = allow_all, which the
-- set-wise start path takes; any other policy sends the run through the
-- one-by-one claim that takes the overlap lock), and whether its grace window
-- applies at all (0 = yes; 1 for backfilled runs, which are started as soon as
-- due however late, and for an occurrence held back by BUFFER_ONE).
ALTER TABLE event_runs
  ADD COLUMN IF NOT EXISTS overlap ENUM('skip','buffer_one','cancel_other') NULL,
  ADD COLUMN IF NOT EXISTS grace_exempt TINYINT(1) NOT NULL DEFAULT 0
;;

-- How far each (definition, scope) is materialised: every occurrence up to
-- `materialized_through` exists as a run. The watermark moves only as far as
-- the runs actually made, so a pass cut short by its count bound resumes
-- exactly where it stopped. No row = start from now.
CREATE TABLE IF NOT EXISTS schedule_watermarks (
  definition_id        BIGINT UNSIGNED NOT NULL,
  scope                VARCHAR(191)    NOT NULL,
  materialized_through DATETIME(3)     NOT NULL,
  PRIMARY KEY (definition_id, scope)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- One row per (definition, scope) whose runs start under an overlap policy:
-- the run that last started there, and the occurrence BUFFER_ONE holds back.
-- Deciding "is an earlier run in progress" locks this row in the claim's
-- transaction, so two instances can never both decide that none is.
CREATE TABLE IF NOT EXISTS overlap_locks (
  definition_id BIGINT UNSIGNED NOT NULL,
  scope         VARCHAR(191)    NOT NULL,
  run_id        BIGINT UNSIGNED NOT NULL,
  held_run_id   BIGINT UNSIGNED NULL,
  acquired_at   DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (definition_id, scope)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
