package keys_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is one test's database (a clone of the migrated template).
type bundle struct {
	t  *testing.T
	db *gorm.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	return &bundle{t: t, db: pgtest.New(t)}
}

var ctx = context.Background()
