-- +goose Up
-- Each statement line's channel fee and net credit (issue 21). Both are exact at the channel's
-- precision, in thousandths of a minor unit (reconcile.SubMinor): WeChat Pay states fees to
-- 1e-5 yuan, 0.001 fen. fee_subminor is positive when the channel charged it; net_subminor is
-- what the merchant is credited (refunds negative). net_currency is set only where the net is in
-- another currency than amount_minor (Adyen's Net Currency); NULL means currency. Lines imported
-- before this migration read 0, 0, NULL: no fee was recorded for them.
ALTER TABLE statement_lines
    ADD COLUMN fee_subminor bigint NOT NULL DEFAULT 0,
    ADD COLUMN net_subminor bigint NOT NULL DEFAULT 0,
    ADD COLUMN net_currency text;
-- The benchmark baseline copies into a table LIKE the staging table: keep it the same shape.
ALTER TABLE statement_line_staging
    ADD COLUMN fee_subminor bigint NOT NULL DEFAULT 0,
    ADD COLUMN net_subminor bigint NOT NULL DEFAULT 0,
    ADD COLUMN net_currency text;

-- +goose Down
ALTER TABLE statement_line_staging DROP COLUMN fee_subminor, DROP COLUMN net_subminor, DROP COLUMN net_currency;
ALTER TABLE statement_lines DROP COLUMN fee_subminor, DROP COLUMN net_subminor, DROP COLUMN net_currency;
