-- Cues that find their person, and notifications out.
--
-- cue_ladders: one row per cue step, written when the cue first parks. The
-- counters (reminders_sent, escalation_level) move only by compare-and-set
-- from the value the runner read, in the same transaction as the
-- notification the rung sends, so a rung re-entered after a crash is neither
-- lost nor sent twice. The answer columns are written once (answer_outcome
-- IS NULL guards them), in the transaction that completes or skips the step.

CREATE TABLE IF NOT EXISTS cue_ladders (
  step_id          BIGINT UNSIGNED NOT NULL,
  run_id           BIGINT UNSIGNED NOT NULL,
  prompt           VARCHAR(1000)   NOT NULL,
  opened_at        DATETIME(3)     NOT NULL,
  deadline_at      DATETIME(3)     NULL,
  -- Names and `team:NAME` entries; escalations append to it.
  assignees        JSON            NOT NULL,
  exclusive        TINYINT(1)      NOT NULL DEFAULT 0,
  escalation_level INT UNSIGNED    NOT NULL DEFAULT 0,
  reminders_sent   INT UNSIGNED    NOT NULL DEFAULT 0,
  answer_outcome   VARCHAR(16)     NULL,
  answer_by        VARCHAR(191)    NULL,
  answer_via       VARCHAR(16)     NULL,
  answer_at        DATETIME(3)     NULL,
  answer_note      VARCHAR(1000)   NULL,
  PRIMARY KEY (step_id),
  KEY idx_cueladder_run (run_id),
  CONSTRAINT fk_cueladder_step FOREIGN KEY (step_id) REFERENCES event_run_steps (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS notification_channels (
  id                 BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name               VARCHAR(191)    NOT NULL,
  kind               ENUM('WEBHOOK','SLACK','EMAIL') NOT NULL,
  target             VARCHAR(2000)   NOT NULL,
  events             JSON            NOT NULL,
  definition_ids     JSON            NULL,
  teams              JSON            NULL,
  late_start_seconds INT UNSIGNED    NOT NULL DEFAULT 60,
  -- A `{{secret.NAME}}` reference, never the secret itself.
  signing_secret     VARCHAR(200)    NULL,
  enabled            TINYINT(1)      NOT NULL DEFAULT 1,
  created_at         DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at         DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uq_notifchan_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- The outbox. An event row is written in the transaction of the change that
-- made it, and only when some enabled channel listens for its type; its
-- deliveries (one per matching channel) in the same statement group. No
-- foreign key to runs: the outbox is history with its own retention, and a
-- delivery log outlives a deleted run.

CREATE TABLE IF NOT EXISTS notification_events (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  -- The public id (`webhook-id`), the same on every attempt and channel.
  event_id     VARCHAR(64)     NOT NULL,
  type         VARCHAR(32)     NOT NULL,
  run_id       BIGINT UNSIGNED NULL,
  step_id      BIGINT UNSIGNED NULL,
  -- What makes this event happen once (e.g. `cue:17:reminder:2`): a second
  -- writer of the same fact inserts nothing.
  dedupe_key   VARCHAR(191)    NOT NULL,
  payload      JSON            NOT NULL,
  occurred_at  DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_notifevent_public (event_id),
  UNIQUE KEY uq_notifevent_dedupe (dedupe_key),
  KEY idx_notifevent_occurred (occurred_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

CREATE TABLE IF NOT EXISTS notification_deliveries (
  id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  event_row_id     BIGINT UNSIGNED NOT NULL,
  channel_id       BIGINT UNSIGNED NOT NULL,
  run_id           BIGINT UNSIGNED NULL,
  status           ENUM('PENDING','DELIVERED','FAILED') NOT NULL DEFAULT 'PENDING',
  rehearsal        TINYINT(1)      NOT NULL DEFAULT 0,
  attempts         INT UNSIGNED    NOT NULL DEFAULT 0,
  last_error       VARCHAR(1000)   NULL,
  next_attempt_at  DATETIME(3)     NULL,
  -- Retries stop here (24 h after the event, or after a redeliver) and it is FAILED.
  give_up_at       DATETIME(3)     NULL,
  claimed_by       VARCHAR(100)    NULL,
  claim_token      CHAR(32)        NULL,
  claim_expires_at DATETIME(3)     NULL,
  created_at       DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  delivered_at     DATETIME(3)     NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_notifdelivery_event_channel (event_row_id, channel_id),
  -- The dispatcher's claim reads the due range of PENDING deliveries only.
  KEY idx_notifdelivery_due (status, next_attempt_at),
  KEY idx_notifdelivery_channel (channel_id, id),
  KEY idx_notifdelivery_run (run_id, id),
  KEY idx_notifdelivery_claim (claim_token),
  CONSTRAINT fk_notifdelivery_event FOREIGN KEY (event_row_id) REFERENCES notification_events (id) ON DELETE CASCADE,
  CONSTRAINT fk_notifdelivery_channel FOREIGN KEY (channel_id) REFERENCES notification_channels (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- Answer links: a capability per (cue, delivery attempt), stored only as the
-- SHA-256 of the token. Every link of a cue dies when the cue closes.

CREATE TABLE IF NOT EXISTS cue_links (
  digest       CHAR(64)        NOT NULL,
  step_id      BIGINT UNSIGNED NOT NULL,
  channel_name VARCHAR(191)    NOT NULL,
  created_at   DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  used_at      DATETIME(3)     NULL,
  PRIMARY KEY (digest),
  KEY idx_cuelink_step (step_id),
  CONSTRAINT fk_cuelink_step FOREIGN KEY (step_id) REFERENCES event_run_steps (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- Run alerts (RUN_FAILED, RUN_MISSED, RUN_COMPLETED, RUN_DEGRADED) are written
-- by a trigger on event_runs, so the event commits with the status change
-- that made it, on every path that changes a run (one run, a batch, the
-- start transaction, a cancel), and none of those paths has to remember it.
-- The trigger's test is on NEW/OLD only; the procedure is called for the few
-- updates that change a status to one of those (or health to degraded), and
-- writes nothing unless an enabled channel listens. Times are UTC: every
-- connection of this service sets time_zone = '+00:00'.

CREATE OR REPLACE PROCEDURE notify_run_event(
  IN p_event      VARCHAR(32),
  IN p_run        BIGINT UNSIGNED,
  IN p_definition BIGINT UNSIGNED,
  IN p_scope      VARCHAR(191),
  IN p_scheduled  DATETIME(3),
  IN p_rehearsal  TINYINT,
  IN p_status     VARCHAR(16),
  IN p_health     VARCHAR(16),
  IN p_error      VARCHAR(1000)
)
MODIFIES SQL DATA
BEGIN
  DECLARE v_key VARCHAR(191) DEFAULT CONCAT('run:', p_run, ':', LOWER(p_event));
  DECLARE v_definition VARCHAR(24) DEFAULT CAST(p_definition AS CHAR);
  IF EXISTS (SELECT 1 FROM notification_channels c
              WHERE c.enabled = 1 AND JSON_CONTAINS(c.events, JSON_QUOTE(p_event))
                AND (c.definition_ids IS NULL OR JSON_CONTAINS(c.definition_ids, v_definition))) THEN
    INSERT IGNORE INTO notification_events (event_id, type, run_id, step_id, dedupe_key, payload, occurred_at)
    SELECT CONCAT('evt_', REPLACE(UUID(), '-', '')), p_event, p_run, NULL, v_key,
           JSON_OBJECT(
             'type', CONCAT('run.', LOWER(SUBSTRING(p_event, 5))),
             'event', p_event,
             'occurredAt', CONCAT(LEFT(DATE_FORMAT(NOW(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'),
             'run', JSON_OBJECT(
               'id', CAST(p_run AS CHAR),
               'definition', JSON_OBJECT('id', v_definition, 'slug', d.slug, 'title', d.title),
               'scope', p_scope,
               'scheduledFor', CONCAT(LEFT(DATE_FORMAT(p_scheduled, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'),
               'rehearsal', IF(p_rehearsal = 1, JSON_EXTRACT('true', '$'), JSON_EXTRACT('false', '$')),
               'status', UPPER(p_status),
               'health', UPPER(p_health),
               'error', p_error),
             'step', NULL,
             'cue', NULL),
           NOW(3)
      FROM event_definitions d WHERE d.id = p_definition;
    IF ROW_COUNT() = 1 THEN
      INSERT IGNORE INTO notification_deliveries
             (event_row_id, channel_id, run_id, status, rehearsal, next_attempt_at, give_up_at, delivered_at)
      SELECT LAST_INSERT_ID(), c.id, p_run, IF(p_rehearsal = 1, 'DELIVERED', 'PENDING'), p_rehearsal,
             IF(p_rehearsal = 1, NULL, NOW(3)), IF(p_rehearsal = 1, NULL, NOW(3) + INTERVAL 24 HOUR),
             IF(p_rehearsal = 1, NOW(3), NULL)
        FROM notification_channels c
       WHERE c.enabled = 1 AND JSON_CONTAINS(c.events, JSON_QUOTE(p_event))
         AND (c.definition_ids IS NULL OR JSON_CONTAINS(c.definition_ids, v_definition));
    END IF;
  END IF;
END
;;

CREATE OR REPLACE TRIGGER trg_evrun_notify AFTER UPDATE ON event_runs FOR EACH ROW
BEGIN
  -- Most updates are claims and lease renewals: the tests on NEW/OLD come
  -- first, and no procedure is called while no channel is enabled.
  IF NEW.status <> OLD.status AND NEW.status IN ('failed', 'missed', 'completed')
     AND EXISTS (SELECT 1 FROM notification_channels WHERE enabled = 1) THEN
    CALL notify_run_event(CONCAT('RUN_', UPPER(NEW.status)), NEW.id, NEW.definition_id, NEW.scope,
                          NEW.scheduled_for, NEW.rehearsal, NEW.status, NEW.health, NEW.last_error);
  END IF;
  IF NEW.health = 'degraded' AND OLD.health <> 'degraded'
     AND EXISTS (SELECT 1 FROM notification_channels WHERE enabled = 1) THEN
    CALL notify_run_event('RUN_DEGRADED', NEW.id, NEW.definition_id, NEW.scope,
                          NEW.scheduled_for, NEW.rehearsal, NEW.status, NEW.health, NEW.last_error);
  END IF;
END
