-- +goose Up
-- A key's happy path keeps its history on the key row itself: the claim and the completion each
-- wrote a key_events row (an insert and a primary-key entry per transition, two per key), which
-- cost claim + complete about a tenth of its throughput at 16 clients. The row now carries who
-- claimed it and who completed it, with the event's detail and an id drawn from key_events' own
-- sequence, so the two synthesized events sort among the stored ones exactly where their rows
-- would have (history is ordered by id). Their times are created_at and completed_at, written by
-- now() in the same statement as the event's would have been. Every other transition (takeover,
-- failure, release, recovery, tombstone, operator actions) still writes a key_events row.
-- Keys written before this migration keep their stored events and have NULLs here.
-- NULL defaults: adding the columns rewrites no rows.
ALTER TABLE idempotency_keys
    ADD COLUMN claimed_event_id   bigint,
    ADD COLUMN claimed_by         text,
    ADD COLUMN claimed_detail     jsonb,
    ADD COLUMN completed_event_id bigint,
    ADD COLUMN completed_by       text,
    ADD COLUMN completed_detail   jsonb;

-- key_history is the one timeline readers use: the stored events and the two synthesized from
-- the key row, with key_events' columns. A simple UNION ALL, so the planner pushes a reader's
-- key_id (or kind, or actor) into each branch: key_events' primary key serves one branch, the
-- keys' primary key the others.
CREATE VIEW key_history AS
    SELECT id, key_id, at, kind, actor, detail FROM key_events
    UNION ALL
    SELECT claimed_event_id, id, created_at, 'claimed', claimed_by, claimed_detail
    FROM idempotency_keys WHERE claimed_event_id IS NOT NULL
    UNION ALL
    SELECT completed_event_id, id, completed_at, 'completed', completed_by, completed_detail
    FROM idempotency_keys WHERE completed_event_id IS NOT NULL;

-- The Consumers page lists the daemon's latest actions newest first (key_events_daemon_at_idx
-- serves the stored ones); these serve the synthesized ones. Partial: a service's claim or
-- completion adds no entry.
CREATE INDEX idempotency_keys_daemon_completed_idx ON idempotency_keys (completed_at DESC)
    WHERE completed_by = 'daemon' AND completed_event_id IS NOT NULL;
CREATE INDEX idempotency_keys_daemon_claimed_idx ON idempotency_keys (created_at DESC)
    WHERE claimed_by = 'daemon' AND claimed_event_id IS NOT NULL;

-- +goose Down
DROP INDEX idempotency_keys_daemon_claimed_idx;
DROP INDEX idempotency_keys_daemon_completed_idx;
DROP VIEW key_history;
INSERT INTO key_events (id, key_id, at, kind, actor, detail) OVERRIDING SYSTEM VALUE
    SELECT claimed_event_id, id, created_at, 'claimed', claimed_by, claimed_detail
    FROM idempotency_keys WHERE claimed_event_id IS NOT NULL
    UNION ALL
    SELECT completed_event_id, id, completed_at, 'completed', completed_by, completed_detail
    FROM idempotency_keys WHERE completed_event_id IS NOT NULL;
ALTER TABLE idempotency_keys
    DROP COLUMN completed_detail, DROP COLUMN completed_by, DROP COLUMN completed_event_id,
    DROP COLUMN claimed_detail, DROP COLUMN claimed_by, DROP COLUMN claimed_event_id;
