-- API keys: credentials a person or a service holds, managed through the API
-- instead of the environment, so adding or revoking one needs no restart.
--
-- Only a SHA-256 digest of the secret is kept (the secret is 32 random bytes,
-- so a fast digest is as good as a slow one: there is nothing to guess from).
-- `prefix` is the start of the secret, shown so a person can tell their keys
-- apart; it is too short to be of use to anybody else. `last_used_at` is
-- written at most once a minute per key, not on every request.
CREATE TABLE IF NOT EXISTS api_keys (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name         VARCHAR(191)    NOT NULL,
  role         VARCHAR(16)     NOT NULL,
  teams        JSON            NOT NULL,
  prefix       VARCHAR(32)     NOT NULL,
  digest       BINARY(32)      NOT NULL,
  created_at   DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  created_by   VARCHAR(191)    NOT NULL,
  expires_at   DATETIME(3)     NULL,
  last_used_at DATETIME(3)     NULL,
  revoked_at   DATETIME(3)     NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_api_keys_digest (digest),
  KEY idx_api_keys_revoked (revoked_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci
