-- Indexes that let the paged run list and the run change feed read ranges.
--
-- The paged list walks one index in (scheduled_for DESC, id DESC) order from a
-- cursor, so every page costs what the first costs. InnoDB appends the primary
-- key to each secondary index, so an index ending in scheduled_for is ordered by
-- (scheduled_for, id) within its prefix. Existing indexes already serve no
-- filter (idx_evrun_list), a definition (idx_evrun_definition_list) and one
-- status (idx_evrun_due); these add:
--
-- * idx_evrun_definition_status_list: one definition's runs in given statuses
--   (a show's runs in progress, or its runs that ended) without reading the
--   definition's whole history;
-- * idx_evrun_scope_list: one scope across definitions;
-- * idx_evrun_rehearsal_list: rehearsals only (rare), or real runs only.
--
-- The change feed asks "which runs changed since T?" once per poll interval;
-- idx_evrun_updated makes that a range read of the rows that changed instead
-- of a scan. It is rewritten with every run update (updated_at moves each
-- time), which is the price of a feed that costs nothing per unchanged run.
--
-- ADD INDEX IF NOT EXISTS, so a migrator killed halfway can run the file again.

ALTER TABLE event_runs
  ADD INDEX IF NOT EXISTS idx_evrun_definition_status_list (definition_id, status, scheduled_for),
  ADD INDEX IF NOT EXISTS idx_evrun_scope_list (scope, scheduled_for),
  ADD INDEX IF NOT EXISTS idx_evrun_rehearsal_list (rehearsal, scheduled_for),
  ADD INDEX IF NOT EXISTS idx_evrun_updated (updated_at)
