package cells

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// claimIdentity records which cell the database is, or checks the record: a database is one
// cell's (migration 00132). Two cells of a map on one database, or a database opened under
// another cell's name or id, are refused before anything is written to it.
func claimIdentity(ctx context.Context, db *gorm.DB, spec CellSpec) error {
	var name string
	var id int
	row := db.WithContext(ctx).Raw(`INSERT INTO cell_identity (name, id) VALUES (?, ?)
		ON CONFLICT (only_row) DO UPDATE SET only_row = true RETURNING name, id`, spec.Name, spec.ID).Row()
	if err := row.Scan(&name, &id); err != nil {
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42P01" { // undefined table
			return fmt.Errorf("the database has no cell_identity table: run `idemops migrate up` on it first (%w)", err)
		}
		return fmt.Errorf("cell identity: %w", err)
	}
	if name != spec.Name || id != spec.ID {
		return fmt.Errorf("its database is cell %s (id %d), not %s (id %d): two cells of the map share one database, or the map renamed a cell", name, id, spec.Name, spec.ID)
	}
	return nil
}

// keepIDsInRange moves every sequence of the schema (but the migration tool's) into the cell's id range, [ID<<40,
// (ID+1)<<40), so that row ids are unique across cells and a tenant move copies rows with their
// ids. A sequence already in the range is left alone; one past it (the database was another
// cell's) is refused. Rows made before the database was a cell keep their ids (below 1<<40).
//
// Processes opening the same cell at once serialize on an advisory lock and re-read each
// sequence under it: a setval computed from a value read before another process's setval and the
// claims after it would hand out ids twice.
func keepIDsInRange(ctx context.Context, db *gorm.DB, spec CellSpec) error {
	floor, ceiling := spec.IDFloor(), spec.IDFloor()+1<<idShift
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SELECT pg_advisory_xact_lock(hashtext('idemops cell ids'))`).Error; err != nil {
			return err
		}
		type seq struct {
			Name     string
			MaxValue int64
		}
		var seqs []seq
		if err := tx.Raw(`SELECT format('%I.%I', schemaname, sequencename) AS name, max_value
			FROM pg_sequences WHERE schemaname = current_schema()
			  AND sequencename <> 'goose_db_version_id_seq' -- the migrations' own, each cell's by nature
			ORDER BY 1`).Scan(&seqs).Error; err != nil {
			return fmt.Errorf("list sequences: %w", err)
		}
		for _, sq := range seqs {
			if sq.MaxValue < ceiling-1 {
				return fmt.Errorf("sequence %s ends at %d, below the cell's id range [%d, %d): make its column bigint", sq.Name, sq.MaxValue, floor, ceiling)
			}
			var last int64
			var called bool
			// The sequence read directly: pg_sequences hides last_value from a non-owner.
			if err := tx.Raw(`SELECT last_value, is_called FROM `+sq.Name).Row().Scan(&last, &called); err != nil {
				return fmt.Errorf("read sequence %s: %w", sq.Name, err)
			}
			switch {
			case last >= ceiling:
				return fmt.Errorf("sequence %s is at %d, past the cell's id range [%d, %d): the database holds another cell's ids", sq.Name, last, floor, ceiling)
			case last < floor:
				if err := tx.Exec(`SELECT setval(?::regclass, ?)`, sq.Name, floor).Error; err != nil {
					return fmt.Errorf("move sequence %s into the cell's id range: %w", sq.Name, err)
				}
			}
		}
		return nil
	})
}
