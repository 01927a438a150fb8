-- The calendar and operating many shows: blackout calendars shared by
-- definitions, one occurrence skipped or moved, bulk actions, retry from a
-- step, rehearsal at speed. Every statement is guarded (IF NOT EXISTS),
-- because MariaDB commits DDL implicitly and a migrator killed halfway must be
-- able to run the file again.

-- A named blackout calendar in one zone. `entries` is a JSON array of
-- {from, to, yearly, label}: local dates YYYY-MM-DD, both ends inclusive
-- (yearly entries compare month and day only).
CREATE TABLE IF NOT EXISTS calendars (
  id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name       VARCHAR(100)    NOT NULL,
  timezone   VARCHAR(64)     NOT NULL,
  entries    LONGTEXT        NOT NULL,
  created_at DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uq_calendar_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- Bumped in the same transaction as every change to what a definition's
-- occurrences are excepted by (its calendars, a calendar it observes, a skip
-- or move). A materialisation transaction compares it, under the
-- definition's run guard, with the value its exceptions were read at, and
-- reads them again when they changed meanwhile, so a skip or a blackout that
-- commits during a pass is never overtaken by the pass.
ALTER TABLE event_definitions
  ADD COLUMN IF NOT EXISTS exceptions_rev BIGINT UNSIGNED NOT NULL DEFAULT 0
;;

-- Which calendars a definition observes (by id; the API speaks names).
CREATE TABLE IF NOT EXISTS definition_calendars (
  definition_id BIGINT UNSIGNED NOT NULL,
  calendar_id   BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (definition_id, calendar_id),
  KEY idx_defcal_calendar (calendar_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- One occurrence (definition, scope, original instant) skipped or moved by a
-- person. The original instant is the occurrence's identity: moving it again
-- rewrites `moved_to`, never adds a second row.
CREATE TABLE IF NOT EXISTS occurrence_overrides (
  definition_id BIGINT UNSIGNED NOT NULL,
  scope         VARCHAR(191)    NOT NULL,
  original_at   DATETIME(3)     NOT NULL,
  status        ENUM('skipped','moved') NOT NULL,
  moved_to      DATETIME(3)     NULL,
  reason        VARCHAR(500)    NULL,
  actor         VARCHAR(200)    NULL,
  updated_at    DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (definition_id, scope, original_at),
  KEY idx_override_moved (definition_id, moved_to)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- A rehearsal's speed (timers scaled by 1/speed; 1 for every other run) and
-- the FAILED run a retry was made from (unique: one retry per original).
ALTER TABLE event_runs
  ADD COLUMN IF NOT EXISTS speed DOUBLE NOT NULL DEFAULT 1,
  ADD COLUMN IF NOT EXISTS retry_of BIGINT UNSIGNED NULL
;;

CREATE UNIQUE INDEX IF NOT EXISTS uq_evrun_retry_of ON event_runs (retry_of)
;;

-- One row per bulk action (its id is the bulkId), and the runs it applied to.
CREATE TABLE IF NOT EXISTS bulk_actions (
  id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  action     VARCHAR(20)     NOT NULL,
  actor      VARCHAR(200)    NOT NULL,
  reason     VARCHAR(500)    NULL,
  filter     LONGTEXT        NOT NULL,
  matched    INT             NOT NULL DEFAULT 0,
  applied    INT             NOT NULL DEFAULT 0,
  created_at DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS bulk_action_runs (
  run_id  BIGINT UNSIGNED NOT NULL,
  bulk_id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (run_id, bulk_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
