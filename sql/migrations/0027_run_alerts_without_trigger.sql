-- Run alerts are written by the statements that end runs, not by a trigger.
--
-- The trigger on event_runs (0011) ran for every row of every UPDATE of the
-- table, claims, leases and wakes included, and asked `EXISTS (enabled
-- channel)` for every run a statement ended: for the start transaction's
-- UPDATE of a thousand single-step runs, a thousand subqueries. Measured with
-- the runner's start on one MariaDB (10,000 runs a round, several rounds), the
-- start's UPDATE cost 35-41 µs of MariaDB CPU per run with the trigger and
-- 23.5 without it; a trigger whose test read no table still cost most of the
-- difference.
--
-- Every statement that moves runs into completed, failed or missed, or
-- degrades them, now stamps the rows it moved with a random number of its
-- own (`alert_stamp`) and sends two more statements in its transaction
-- (sql/notifications/runAlerts.ts): the events and their deliveries for
-- exactly those runs, set-wise, and nothing at all while no channel is
-- enabled. The column has no index: those statements find the runs by the
-- ids the move named, and the stamp only tells which of them this statement
-- moved.
--
-- An instance of an older version, still running while this one migrates,
-- writes no run alerts from then on: upgrade the instances together.

ALTER TABLE event_runs
  ADD COLUMN IF NOT EXISTS alert_stamp BIGINT UNSIGNED NULL
;;

DROP TRIGGER IF EXISTS trg_evrun_notify
;;

DROP PROCEDURE IF EXISTS notify_run_event
;;
