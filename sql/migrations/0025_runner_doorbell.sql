-- A runner's doorbell: the connection on which it waits between passes for a
-- "wake up" from an instance that runs no runner (RUNNER=off), and the server
-- that connection is on (`@@hostname:@@port`, so a ringer on another Galera
-- node, whose connection ids are another server's, leaves it alone). An
-- answered cue on an API-only instance ends that wait with `KILL QUERY`, so
-- the runner takes the run at once instead of at its next tick. Written with
-- each heartbeat; NULL when the runner has no doorbell (its connection lost).
--
-- Guarded (IF NOT EXISTS), so a migrator killed halfway can run the file again.
ALTER TABLE runner_heartbeats
  ADD COLUMN IF NOT EXISTS doorbell_connection BIGINT UNSIGNED NULL,
  ADD COLUMN IF NOT EXISTS doorbell_server VARCHAR(255) NULL
;;
