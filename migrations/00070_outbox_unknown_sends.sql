-- +goose Up
-- The outbox relay settles a send whose outcome is unknown by the claim's rule (claim.Judge):
-- a message that may have reached downstream is sent again only after downstream said "not
-- found" twice, a quarantine apart. sends counts the sends that began (each fenced on the run's
-- claim just before it went out), so a row claimed again knows whether an earlier send may have
-- arrived; not_found_at is the first not-found since the last send. Rows already attempted are
-- counted as possibly sent: their attempts may each have sent.
ALTER TABLE outbox
    ADD COLUMN sends        integer NOT NULL DEFAULT 0,
    ADD COLUMN not_found_at timestamptz;
UPDATE outbox SET sends = attempts WHERE attempts > 0 AND state <> 'sent';

-- +goose Down
ALTER TABLE outbox DROP COLUMN not_found_at, DROP COLUMN sends;
