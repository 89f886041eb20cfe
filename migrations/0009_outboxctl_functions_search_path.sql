-- The trigger functions name their tables unqualified (`outbox_ordering`, `outbox`), so they were
-- resolved through the search path of whoever fired them. outboxctl's own sessions have the
-- outbox's schema first, but an operator's psql that dead-letters a row by its qualified name
-- with another schema on its path (`public`, or a second outbox's schema) made the blocking
-- trigger read that schema's ordering switch and set `blocks_key` on that schema's row of the
-- same id. Each function now runs with the search path it was migrated with: its own schema.
ALTER FUNCTION outboxctl_block_key() SET search_path FROM CURRENT;
ALTER FUNCTION outboxctl_notify() SET search_path FROM CURRENT;
ALTER FUNCTION outboxctl_requeues_insert() SET search_path FROM CURRENT;
