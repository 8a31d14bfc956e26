-- +goose Up
-- Settlement and fees (issue 21 item 3). A recon job may carry the channel's fee schedule
-- (reconcile.FeeSchedule as JSON: rate in basis points, fixed part, rounding); NULL checks no
-- fees. Two new kinds of finding: SETTLEMENT_MISMATCH (what a statement states was settled for
-- a day, payout or batch differs from the net of its rows) and FEE_MISMATCH (a line's fee is
-- not what the job's schedule says).
ALTER TABLE recon_jobs ADD COLUMN fee_schedule jsonb;
ALTER TABLE discrepancies DROP CONSTRAINT discrepancies_kind_check;
ALTER TABLE discrepancies ADD CONSTRAINT discrepancies_kind_check CHECK (kind IN ('LOCAL_ONLY', 'CHANNEL_ONLY',
    'STATUS_MISMATCH', 'AMOUNT_MISMATCH', 'CURRENCY_MISMATCH', 'DUPLICATE_AT_CHANNEL', 'DUPLICATE_IN_FILE',
    'CONTROL_TOTAL_MISMATCH', 'SETTLEMENT_MISMATCH', 'FEE_MISMATCH'));

-- +goose Down
DELETE FROM discrepancies WHERE kind IN ('SETTLEMENT_MISMATCH', 'FEE_MISMATCH');
ALTER TABLE discrepancies DROP CONSTRAINT discrepancies_kind_check;
ALTER TABLE discrepancies ADD CONSTRAINT discrepancies_kind_check CHECK (kind IN ('LOCAL_ONLY', 'CHANNEL_ONLY',
    'STATUS_MISMATCH', 'AMOUNT_MISMATCH', 'CURRENCY_MISMATCH', 'DUPLICATE_AT_CHANNEL', 'DUPLICATE_IN_FILE',
    'CONTROL_TOTAL_MISMATCH'));
ALTER TABLE recon_jobs DROP COLUMN fee_schedule;
