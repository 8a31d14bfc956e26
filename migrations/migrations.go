// Package migrations holds the schema as goose SQL migrations, embedded in the binary. It is the
// only way the schema changes. Files are numbered by the package that owns their tables:
// 00001 claim, 00002 console, 00003 daemon, 00004 reconcile, 00005 retention, 00006 demo;
// later changes take the next free number.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"

	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// FS is the embedded migration files.
func FS() fs.FS { return files }

// Provider returns a goose provider for db over the embedded files. Migrations are numbered by
// owning package, so a database made before a lower-numbered file existed gets that file
// applied late instead of being refused (each file touches only its own tables).
func Provider(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectPostgres, db, files, goose.WithAllowOutofOrder(true))
}

// Up applies every pending migration.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := Provider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Hash identifies the schema the embedded migrations produce (used to name test templates).
func Hash() (string, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
