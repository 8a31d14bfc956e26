-- +goose Up
-- The answers a key's client got from the stored record without an execution (a replay, a 409
-- while in progress, a 422 for a reused key), aggregated per key, kind and status. Written in
-- batches by claim.AnswerRecorder, off the answering path: the newest moments may be lost in a
-- crash. No foreign key, like key_events: the purge and Release delete a key's answers in the
-- statement that deletes the key.
CREATE TABLE key_answers (
    key_id   bigint      NOT NULL,
    kind     text        NOT NULL CHECK (kind IN ('replay', 'in_progress', 'mismatch')),
    status   integer     NOT NULL,
    count    bigint      NOT NULL,
    first_at timestamptz NOT NULL,
    last_at  timestamptz NOT NULL,
    PRIMARY KEY (key_id, kind, status)
);

-- +goose Down
DROP TABLE key_answers;
