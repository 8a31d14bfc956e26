-- +goose Up
-- A key's stored answer (status, headers, body) moves out of idempotency_keys into key_responses,
-- partitioned by range on the day (UTC) the answer was stored, so that retention's first stage
-- drops a day's answers wholesale (claim.DropExpiredResponses: the few a legal hold, an open
-- finding or a longer policy keeps are moved to today's partition first) instead of rewriting
-- every key row. The key row says where its answer is (response_day): readers join on
-- (key_id, day), which the partition's primary key serves after run-time pruning. The uniqueness
-- of (tenant, operation, key) stays where it was, one constraint on idempotency_keys; nothing
-- here is checked across partitions. Partitions are created ahead (claim.EnsureResponsePartitions,
-- by the claim store once a day and by every purge), bounded to a few days.
CREATE TABLE key_responses (
    key_id  bigint  NOT NULL,
    day     date    NOT NULL,
    status  integer NOT NULL,
    headers jsonb,
    body    bytea,
    PRIMARY KEY (key_id, day)
) PARTITION BY RANGE (day);

-- Which dropped day took a key's answer away, once per drop: the key's response_expired event
-- is synthesized from it (key_history) rather than written per key.
CREATE TABLE key_response_drops (
    day        date        PRIMARY KEY,
    dropped_at timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    event_id   bigint      NOT NULL DEFAULT nextval('key_events_id_seq')
);

ALTER TABLE idempotency_keys ADD COLUMN response_day date;

-- +goose StatementBegin
DO $$
DECLARE d date;
BEGIN
    FOR d IN
        SELECT DISTINCT (COALESCE(completed_at, updated_at) AT TIME ZONE 'UTC')::date FROM idempotency_keys WHERE response_status IS NOT NULL
        UNION SELECT (now() AT TIME ZONE 'UTC')::date + i FROM generate_series(-1, 7) i
    LOOP
        EXECUTE format('CREATE TABLE key_responses_%s PARTITION OF key_responses FOR VALUES FROM (%L) TO (%L)',
            to_char(d, 'YYYYMMDD'), d, d + 1);
    END LOOP;
END $$;
-- +goose StatementEnd

UPDATE idempotency_keys SET response_day = (COALESCE(completed_at, updated_at) AT TIME ZONE 'UTC')::date
WHERE response_status IS NOT NULL;
INSERT INTO key_responses (key_id, day, status, headers, body)
SELECT id, response_day, response_status, response_headers, response_body FROM idempotency_keys WHERE response_status IS NOT NULL;

-- Retention's first stage asks, per day, whether any answer of the day is still within its
-- response period: this index answers without reading the day's keys. It replaces
-- idempotency_keys_response_expires_idx (one entry per answered key, as before).
DROP INDEX idempotency_keys_response_expires_idx;
CREATE INDEX idempotency_keys_response_day_idx ON idempotency_keys (response_day, response_expires_at) WHERE response_day IS NOT NULL;
ALTER TABLE idempotency_keys DROP COLUMN response_status, DROP COLUMN response_headers, DROP COLUMN response_body;

-- A day's drop re-checks, under its short exclusive lock, the keys put on legal hold since it
-- counted them: a handful, through this partial index (a claim adds no entry).
CREATE INDEX idempotency_keys_legal_hold_idx ON idempotency_keys (id) WHERE legal_hold;

-- The key timeline: as in 00059, and a response_expired event for each key whose answer went
-- with a dropped day (final keys only: a retryable key whose answer is dropped gets a stored
-- event and loses its response_day).
CREATE OR REPLACE VIEW key_history AS
    SELECT id, key_id, at, kind, actor, detail FROM key_events
    UNION ALL
    SELECT claimed_event_id, id, created_at, 'claimed', claimed_by, claimed_detail
    FROM idempotency_keys WHERE claimed_event_id IS NOT NULL
    UNION ALL
    SELECT completed_event_id, id, completed_at, 'completed', completed_by, completed_detail
    FROM idempotency_keys WHERE completed_event_id IS NOT NULL
    UNION ALL
    SELECT d.event_id, k.id, d.dropped_at, 'response_expired', d.actor, '{}'::jsonb
    FROM idempotency_keys k JOIN key_response_drops d ON d.day = k.response_day;

-- +goose Down
CREATE OR REPLACE VIEW key_history AS
    SELECT id, key_id, at, kind, actor, detail FROM key_events
    UNION ALL
    SELECT claimed_event_id, id, created_at, 'claimed', claimed_by, claimed_detail
    FROM idempotency_keys WHERE claimed_event_id IS NOT NULL
    UNION ALL
    SELECT completed_event_id, id, completed_at, 'completed', completed_by, completed_detail
    FROM idempotency_keys WHERE completed_event_id IS NOT NULL;
ALTER TABLE idempotency_keys ADD COLUMN response_status integer, ADD COLUMN response_headers jsonb, ADD COLUMN response_body bytea;
UPDATE idempotency_keys k SET response_status = r.status, response_headers = r.headers, response_body = r.body
FROM key_responses r WHERE r.key_id = k.id AND r.day = k.response_day;
CREATE INDEX idempotency_keys_response_expires_idx ON idempotency_keys (response_expires_at, id, expires_at) WHERE response_body IS NOT NULL;
DROP INDEX idempotency_keys_legal_hold_idx;
DROP INDEX idempotency_keys_response_day_idx;
ALTER TABLE idempotency_keys DROP COLUMN response_day;
DROP TABLE key_response_drops;
DROP TABLE key_responses;
