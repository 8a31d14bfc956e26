-- +goose Up
-- Which cell a database is (issue 36, package cells): written once, by the first process that
-- opens it as a cell, and checked by every later one, so two cells of a map never share one
-- database (their id ranges would then interleave in one set of sequences) and a database is
-- never opened under another cell's id. A database run without a cell map has no row.
CREATE TABLE cell_identity (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    name     text NOT NULL,
    id       integer NOT NULL CHECK (id BETWEEN 1 AND 1000),
    since    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE cell_identity;
