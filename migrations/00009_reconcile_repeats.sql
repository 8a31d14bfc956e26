-- +goose Up
-- What the import saw while it streamed a statement's order lines (success, failed): whether a
-- channel txn id or a merchant order number appears on more than one of them. Each is a "maybe"
-- (the import compares 64-bit hashes, so a collision says true for nothing): false lets the
-- matcher skip its duplicate passes, true or NULL (statements imported before this column) makes
-- it look exactly.
-- order_lines counts those lines, so that the matcher need not.
ALTER TABLE statements ADD COLUMN repeated_txn_ids boolean, ADD COLUMN repeated_order_nos boolean, ADD COLUMN order_lines integer;

-- +goose Down
ALTER TABLE statements DROP COLUMN order_lines, DROP COLUMN repeated_order_nos, DROP COLUMN repeated_txn_ids;
