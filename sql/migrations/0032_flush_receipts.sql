-- A receipt per flush of the runner's step outcomes (sql/flushReceipts.ts).
--
-- A flush is one transaction sent in one text, and it is sent again while
-- the database cannot be reached. When a COMMIT's answer is lost, the
-- transaction may have been kept: its guarded moves match nothing the
-- second time, but its log lines are plain INSERTs and were written twice.
-- Each flush now writes a row naming it; one sent again first looks for
-- that row, and sends nothing when it is there.
--
-- Keyed by when the flush was first sent, then 16 random bytes: a lookup is
-- one entry, and the retention sweep deletes old receipts as a range of the
-- key. Rows are a few dozen bytes and live minutes.
CREATE TABLE IF NOT EXISTS flush_receipts (
  written_at DATETIME(3) NOT NULL,
  token BINARY(16) NOT NULL,
  PRIMARY KEY (written_at, token)
) ENGINE=InnoDB
