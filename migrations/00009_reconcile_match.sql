-- +goose Up
-- What the import saw while it streamed a statement's order lines (success, failed): whether a
-- channel txn id or a merchant order number appears on more than one of them. Each is a "maybe"
-- (the import compares 64-bit hashes, so a collision says true for nothing): false lets the
-- matcher skip its duplicate passes, true or NULL (statements imported before this column) makes
-- it look exactly.
-- order_lines counts those lines, so that the matcher need not.
ALTER TABLE statements ADD COLUMN repeated_txn_ids boolean, ADD COLUMN repeated_order_nos boolean, ADD COLUMN order_lines integer;

-- statement_lines.id loses its primary key (and discrepancies.statement_line_id its foreign key):
-- maintaining that b-tree through a million-line COPY took as long as the rest of the import,
-- and nothing looks a line up by id — a finding carries the line's number, txn id and amounts
-- in its detail, and the matcher writes statement_line_id from the lines it has just read. A
-- BRIN range over id (lines arrive in id order) finds one if someone needs to, at almost no
-- cost to the load.
ALTER TABLE discrepancies DROP CONSTRAINT discrepancies_statement_line_id_fkey;
ALTER TABLE statement_lines DROP CONSTRAINT statement_lines_pkey;
CREATE INDEX statement_lines_id_idx ON statement_lines USING brin (id) WITH (pages_per_range = 32);

-- +goose Down
DROP INDEX statement_lines_id_idx;
ALTER TABLE statement_lines ADD PRIMARY KEY (id);
UPDATE discrepancies d SET statement_line_id = NULL
WHERE statement_line_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM statement_lines l WHERE l.id = d.statement_line_id);
ALTER TABLE discrepancies ADD CONSTRAINT discrepancies_statement_line_id_fkey FOREIGN KEY (statement_line_id) REFERENCES statement_lines (id) ON DELETE SET NULL;
ALTER TABLE statements DROP COLUMN order_lines, DROP COLUMN repeated_order_nos, DROP COLUMN repeated_txn_ids;
