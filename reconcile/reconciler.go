package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// Operations finds the claim.Operation a key's operation name stands for (the downstream
// registry implements it). Recover needs it to look the channel's document up.
type Operations interface {
	Get(name string) (claim.Operation, bool)
}

// Auditor records who did what to which object (the console's audit log implements it).
// Every resolution of a finding is recorded through it.
type Auditor interface {
	Record(ctx context.Context, actor, action, target string, detail map[string]any) error
}

// Config tunes a Reconciler. Zero fields take the defaults in one place, withDefaults.
type Config struct {
	// MaxBytes limits one statement (decompressed); default DefaultMaxBytes.
	MaxBytes int64
	// MatchTimeout bounds the matching queries of one run (default 10 min).
	MatchTimeout time.Duration
	// Store is the claim logic recover goes through; Operations names its operations. Without
	// them Recover refuses.
	Store      *claim.Store
	Operations Operations
	// Auditor records every resolution; required for Resolve, Ignore and Recover.
	Auditor Auditor
	// Sources is where statements may be fetched from (the allow-list and the file root).
	Sources SourcePolicy
	// Keyring seals channel credentials and the secrets of job sources; without one, saving a
	// credential or a source with a secret in it is refused.
	Keyring *Keyring
	// FetchTimeout bounds one request of a fetch (default 2 min).
	FetchTimeout time.Duration
	// RetryBackoff is the first pause after "not ready yet" (default 30 s), doubling up to
	// RetryBackoffMax (default 10 min), until the job's ready deadline.
	RetryBackoff, RetryBackoffMax time.Duration
	// ProgressInterval is how often a run's progress is written to recon_runs (default 500 ms).
	ProgressInterval time.Duration
	// TempDir holds statements fetched over HTTP while they are imported (default os.TempDir).
	TempDir string
	Logger  *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Cells, in a deployment of cells, are the reconcilers of the cells holding any of tenants
	// (AllTenants: every cell). A recon job's statement is fetched here, in the control cell,
	// and imported and matched in each of them (cells.go). Nil: this database holds every tenant.
	Cells func(tenants []string) ([]Cell, error)
	// BulkApprovalAbove: a bulk run of more findings waits for a second operator's approval
	// (four eyes; default 1000). BulkCap bounds the findings of one bulk run (default 1,000,000).
	BulkApprovalAbove int
	BulkCap           int
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MatchTimeout == 0 {
		c.MatchTimeout = 10 * time.Minute
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = 2 * time.Minute
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 30 * time.Second
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = 10 * time.Minute
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.BulkApprovalAbove == 0 {
		c.BulkApprovalAbove = 1000
	}
	if c.BulkCap == 0 {
		c.BulkCap = 1_000_000
	}
	switch {
	case c.MaxBytes < 0:
		return c, errors.New("reconcile: MaxBytes must be positive")
	case c.BulkApprovalAbove < 0 || c.BulkCap < 1:
		return c, errors.New("reconcile: BulkApprovalAbove must be 0 or more and BulkCap positive")
	case c.RetryBackoff < 0 || c.RetryBackoffMax < c.RetryBackoff:
		return c, errors.New("reconcile: RetryBackoffMax must be at least RetryBackoff")
	}
	return c, nil
}

// Reconciler imports statements, matches them against idempotency_keys, keeps the findings and
// applies their resolutions. It owns the tables of migrations/00004_reconcile.sql.
type Reconciler struct {
	db      *gorm.DB
	cfg     Config
	sources *sourcePolicy
	http    *http.Client // every fetch: the allow-list's dialer and redirect check
}

// New validates cfg and returns a Reconciler on db.
func New(db *gorm.DB, cfg Config) (*Reconciler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sources, err := newSourcePolicy(cfg.Sources)
	if err != nil {
		return nil, err
	}
	return &Reconciler{db: db, cfg: cfg, sources: sources, http: sources.client(cfg.FetchTimeout, nil)}, nil
}

// Config returns the effective configuration.
func (r *Reconciler) Config() Config { return r.cfg }
