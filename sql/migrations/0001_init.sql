-- showrunner: initial schema.
--
-- Every timestamp is DATETIME(3) holding UTC: the pool pins each session's
-- time_zone to '+00:00', so NOW(3) and the values mysql2 binds agree.
-- Statements are separated by a line holding only ';;' (see sql/migrate.ts) and
-- every one is guarded (IF NOT EXISTS), because MariaDB commits DDL implicitly and
-- a migrator killed halfway must be able to run the file again.

CREATE TABLE IF NOT EXISTS event_definitions (
  id                   BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  slug                 VARCHAR(100)    NOT NULL,
  title                VARCHAR(200)    NOT NULL,
  description          TEXT            NULL,
  schedule             VARCHAR(120)    NULL,
  timezone             VARCHAR(64)     NOT NULL DEFAULT 'UTC',
  grace_seconds        INT UNSIGNED    NOT NULL DEFAULT 300,
  concurrency_key      VARCHAR(255)    NULL,
  scopes               JSON            NOT NULL,
  state                ENUM('active','paused','archived') NOT NULL DEFAULT 'active',
  current_version_id   BIGINT UNSIGNED NULL,
  -- Materialisation watermark: occurrences up to here exist as runs. NULL means
  -- "start from now"; reset when the schedule, zone or scopes change.
  materialized_through DATETIME(3)     NULL,
  created_at           DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at           DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uq_evdef_slug (slug),
  KEY idx_evdef_state (state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS event_versions (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  definition_id BIGINT UNSIGNED NOT NULL,
  version       INT UNSIGNED    NOT NULL,
  program       JSON            NOT NULL,
  created_by    VARCHAR(191)    NULL,
  created_at    DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uq_evver_definition_version (definition_id, version),
  CONSTRAINT fk_evver_definition FOREIGN KEY (definition_id) REFERENCES event_definitions (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS event_runs (
  id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  definition_id    BIGINT UNSIGNED NOT NULL,
  version_id       BIGINT UNSIGNED NOT NULL,
  scope            VARCHAR(191)    NOT NULL DEFAULT '',
  scheduled_for    DATETIME(3)     NOT NULL,
  timezone         VARCHAR(64)     NOT NULL DEFAULT 'UTC',
  -- The resolved key (template already applied); NULL never contends.
  concurrency_key  VARCHAR(255)    NULL,
  params           JSON            NULL,
  rehearsal        TINYINT(1)      NOT NULL DEFAULT 0,
  started_by       VARCHAR(191)    NULL,
  status           ENUM('scheduled','starting','running','paused','ending',
                        'completed','cancelled','failed','missed') NOT NULL DEFAULT 'scheduled',
  health           ENUM('ok','degraded') NOT NULL DEFAULT 'ok',
  current_phase    VARCHAR(100)    NULL,
  last_error       VARCHAR(1000)   NULL,
  claimed_by       VARCHAR(100)    NULL,
  claim_expires_at DATETIME(3)     NULL,
  -- Identifies one batch claim ("claim many, then read what you own").
  claim_token      VARCHAR(64)     NULL,
  -- When the runner next needs to look at this run. NULL = nothing to do until a
  -- person acts (a parked cue without timeout, a paused or terminal run). This is
  -- what keeps idle runs out of the due index, so they cannot starve new ones.
  wake_at          DATETIME(3)     NULL,
  started_at       DATETIME(3)     NULL,
  ended_at         DATETIME(3)     NULL,
  created_at       DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at       DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  -- One run per occurrence per scope. Rehearsals are a separate lane, so
  -- practising at the show's own time never collides with the real run.
  UNIQUE KEY uq_evrun_occurrence (definition_id, scope, scheduled_for, rehearsal),
  KEY idx_evrun_due (status, scheduled_for),
  KEY idx_evrun_concurrency (concurrency_key, status),
  KEY idx_evrun_wake (wake_at),
  KEY idx_evrun_list (scheduled_for, id),
  KEY idx_evrun_definition_list (definition_id, scheduled_for),
  KEY idx_evrun_claim_token (claim_token),
  KEY idx_evrun_ended (status, ended_at),
  CONSTRAINT fk_evrun_definition FOREIGN KEY (definition_id) REFERENCES event_definitions (id),
  CONSTRAINT fk_evrun_version FOREIGN KEY (version_id) REFERENCES event_versions (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS event_run_steps (
  id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  run_id           BIGINT UNSIGNED NOT NULL,
  seq              INT UNSIGNED    NOT NULL,
  phase_index      INT UNSIGNED    NOT NULL,
  phase            VARCHAR(100)    NOT NULL,
  ending           TINYINT(1)      NOT NULL DEFAULT 0,
  kind             VARCHAR(100)    NOT NULL,
  params           JSON            NULL,
  max_attempts     INT UNSIGNED    NOT NULL DEFAULT 5,
  backoff_ms       INT UNSIGNED    NOT NULL DEFAULT 1000,
  timeout_ms       INT UNSIGNED    NOT NULL DEFAULT 30000,
  on_error         ENUM('fail','degrade') NOT NULL DEFAULT 'fail',
  status           ENUM('pending','running','completed','failed','skipped','cancelled') NOT NULL DEFAULT 'pending',
  -- Parked = waiting on a person (a cue). A core.wait timer or a retry backoff is
  -- `running` with a wake_at but is not parked.
  parked           TINYINT(1)      NOT NULL DEFAULT 0,
  attempts         INT UNSIGNED    NOT NULL DEFAULT 0,
  wake_at          DATETIME(3)     NULL,
  claimed_by       VARCHAR(100)    NULL,
  claim_expires_at DATETIME(3)     NULL,
  started_at       DATETIME(3)     NULL,
  ended_at         DATETIME(3)     NULL,
  last_error       VARCHAR(1000)   NULL,
  result           JSON            NULL,
  updated_at       DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uq_evstep_run_seq (run_id, seq),
  KEY idx_evstep_waiting (parked, status, started_at),
  CONSTRAINT fk_evstep_run FOREIGN KEY (run_id) REFERENCES event_runs (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS event_run_logs (
  id       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  run_id   BIGINT UNSIGNED NOT NULL,
  step_id  BIGINT UNSIGNED NULL,
  at       DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  level    VARCHAR(10)     NOT NULL DEFAULT 'info',
  message  VARCHAR(2000)   NOT NULL,
  actor    VARCHAR(191)    NULL,
  data     JSON            NULL,
  PRIMARY KEY (id),
  KEY idx_evlog_run (run_id, id),
  CONSTRAINT fk_evlog_run FOREIGN KEY (run_id) REFERENCES event_runs (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- One row per concurrency key while a run holds it. Taking a key is an INSERT of
-- this row in the same short transaction as the run's claim, so two instances can
-- never both see "free" and both start (the seed's read-then-claim race).
CREATE TABLE IF NOT EXISTS concurrency_locks (
  lock_key    VARCHAR(255)    NOT NULL,
  run_id      BIGINT UNSIGNED NOT NULL,
  acquired_at DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (lock_key),
  KEY idx_conclock_run (run_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS runner_heartbeats (
  instance_id  VARCHAR(100)  NOT NULL,
  host         VARCHAR(255)  NOT NULL,
  pid          INT UNSIGNED  NOT NULL,
  started_at   DATETIME(3)   NOT NULL,
  last_tick_at DATETIME(3)   NOT NULL,
  tick_lag_ms  INT UNSIGNED  NOT NULL DEFAULT 0,
  stopped_at   DATETIME(3)   NULL,
  PRIMARY KEY (instance_id),
  KEY idx_heartbeat_tick (last_tick_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- Mutations that do not belong to one run (definitions, versions) are recorded
-- here with their actor and outcome; run controls go to event_run_logs.
CREATE TABLE IF NOT EXISTS audit_log (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  at          DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  actor       VARCHAR(191)    NOT NULL,
  action      VARCHAR(100)    NOT NULL,
  target_type VARCHAR(50)     NOT NULL,
  target_id   VARCHAR(100)    NULL,
  outcome     VARCHAR(20)     NOT NULL,
  detail      JSON            NULL,
  PRIMARY KEY (id),
  KEY idx_audit_target (target_type, target_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
