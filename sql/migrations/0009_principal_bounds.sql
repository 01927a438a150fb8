-- Runs created per principal per minute (MAX_RUNS_PER_MINUTE): one row per
-- (principal, minute), shared by every instance on the database, so the quota
-- holds however requests are spread. A creator takes its count with one
-- guarded UPDATE (it applies only while the window has room), so two instances
-- cannot both take the last of it. Rows of past minutes are swept by the
-- housekeeping pass.

CREATE TABLE IF NOT EXISTS run_quotas (
  principal     VARCHAR(191)    NOT NULL,
  window_minute BIGINT UNSIGNED NOT NULL,
  runs          INT UNSIGNED    NOT NULL DEFAULT 0,
  PRIMARY KEY (principal, window_minute),
  KEY idx_run_quotas_minute (window_minute)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
;;

-- audit_log retention (AUDIT_RETENTION_DAYS) deletes by age, oldest first.

ALTER TABLE audit_log ADD INDEX IF NOT EXISTS idx_audit_at (at)
