-- +goose Up
-- Which channel account a key's downstream call went through (issue 32): the service says so
-- on its lease when it calls the channel (claim.Lease.ChannelAccount) and the claim logic keeps
-- it with the key's completion or failure. Reconciliation matches a statement only against the
-- keys recorded at its account (and, for keys recorded before accounts were, by tenant as
-- before). NULL: not recorded. Adding a nullable column without a default rewrites nothing.
ALTER TABLE idempotency_keys ADD COLUMN channel_account text;

-- A statement file belongs to the channel account it was imported under: the same bytes
-- uploaded under another account are that account's statement, never a re-run of the first
-- one's (which labelled and counted the first account's findings under the second's run).
ALTER TABLE statements DROP CONSTRAINT statements_sha256_key;
ALTER TABLE statements ADD CONSTRAINT statements_channel_sha256 UNIQUE (channel, sha256);

-- What a run found about keys recorded without a channel account (matched by tenant, as
-- before accounts were recorded): the run page says how many.
ALTER TABLE recon_runs ADD COLUMN keys_without_account bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE recon_runs DROP COLUMN keys_without_account;
ALTER TABLE statements DROP CONSTRAINT statements_channel_sha256;
ALTER TABLE statements ADD CONSTRAINT statements_sha256_key UNIQUE (sha256);
ALTER TABLE idempotency_keys DROP COLUMN channel_account;
