-- +goose Up
-- Statements fetched from the channels' own APIs (issue 34). A channel account has a kind — which
-- fetcher gets its statements: 'generic' (the job's URL template or file path, as before),
-- 'wechatpay_v3', 'alipay', 'stripe', 'adyen' — and the settings that kind needs that are not
-- secret (the API's origin, the merchant id, the channel's public keys). Its secrets (private
-- keys, API keys, report passwords) are channel_credentials rows: sealed with AES-256-GCM under a
-- key derived from the deployment secret (key_id names which), or the name of a file read at each
-- fetch; never shown after they are saved (digest is a short SHA-256 prefix shown instead).
ALTER TABLE channel_accounts
    ADD COLUMN kind     text  NOT NULL DEFAULT 'generic'
        CHECK (kind IN ('generic', 'wechatpay_v3', 'alipay', 'stripe', 'adyen')),
    ADD COLUMN settings jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(settings) = 'object');

CREATE TABLE channel_credentials (
    channel    text        NOT NULL REFERENCES channel_accounts (channel) ON DELETE CASCADE,
    name       text        NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    -- What the channel knows the credential by, when it names it (a merchant certificate's serial).
    label      text        NOT NULL DEFAULT '' CHECK (length(label) <= 128),
    sealed     bytea,
    file       text        CHECK (file IS NULL OR (file LIKE '/%' AND length(file) <= 1024)),
    key_id     text        NOT NULL DEFAULT '',
    digest     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL,
    PRIMARY KEY (channel, name),
    CHECK ((sealed IS NULL) <> (file IS NULL))
);

-- Which of the account's bills a job reconciles ('tradebill', 'fundflowbill', 'trade',
-- 'signcustomer'; '' for the kind's default), and the secrets of a generic job's source (a
-- token in its query, a password in its user info), sealed like credentials and kept apart from
-- source, which holds '***' in their place.
ALTER TABLE recon_jobs
    ADD COLUMN bill          text NOT NULL DEFAULT '' CHECK (length(bill) <= 32),
    ADD COLUMN source_secret bytea;

-- +goose Down
ALTER TABLE recon_jobs DROP COLUMN source_secret, DROP COLUMN bill;
DROP TABLE channel_credentials;
ALTER TABLE channel_accounts DROP COLUMN settings, DROP COLUMN kind;
