-- The inboxes' doorbells: an instance whose cue inbox has subscribers waits
-- on a connection of its own (`SELECT SLEEP`) and writes here where that
-- connection is (its id, and its server as `@@hostname:@@port`). A runner
-- that parks cues ends those sleeps with `KILL QUERY`, so an instance that
-- did not park them (an API-only one, or another full instance) reads its
-- inbox at once instead of at its next poll. `seen_at` is renewed every few
-- seconds while the doorbell is up; a row older than that belongs to an
-- instance that stopped or lost it, and is not rung.
--
-- Guarded (IF NOT EXISTS), so a migrator killed halfway can run the file again.
CREATE TABLE IF NOT EXISTS inbox_doorbells (
  instance_id         VARCHAR(100)    NOT NULL,
  doorbell_connection BIGINT UNSIGNED NOT NULL,
  doorbell_server     VARCHAR(255)    NOT NULL,
  seen_at             DATETIME(3)     NOT NULL,
  PRIMARY KEY (instance_id),
  KEY idx_inbox_doorbell_seen (seen_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;
