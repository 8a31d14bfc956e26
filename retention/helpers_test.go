package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/retention"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var secret = []byte("retention-test-secret-0123")

const day = 24 * time.Hour

// bundle is one test's world: a fresh database, the claim store and a purge job without pauses.
type bundle struct {
	t     testing.TB
	ctx   context.Context
	db    *gorm.DB
	store *claim.Store
	job   *retention.PurgeJob
}

func setup(t *testing.T, cfgs ...func(*retention.Config)) *bundle {
	t.Helper()
	t.Parallel()
	db := pgtest.New(t)
	store, err := claim.NewStore(db, claim.Config{DigestSecret: secret, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := retention.Config{BatchSize: 500, MinBatchSize: 10, PauseMax: -1}
	for _, f := range cfgs {
		f(&cfg)
	}
	job, err := retention.NewPurgeJob(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, ctx: context.Background(), db: db, store: store, job: job}
}

func request(op, key string) claim.Request {
	return claim.Request{Tenant: "t1", Operation: op, Key: key, Actor: "service:test",
		Intent: json.RawMessage(fmt.Sprintf(`{"amount_minor": 100, "currency": "CNY", "ref": %q}`, key))}
}

// claimKey claims a fresh key and returns its lease.
func (b *bundle) claimKey(op, key string) *claim.Lease {
	b.t.Helper()
	out, err := b.store.Claim(b.ctx, request(op, key))
	if err != nil {
		b.t.Fatal(err)
	}
	if out.Kind != claim.Acquired {
		b.t.Fatalf("claim %s: %s, want acquired", key, out.Kind)
	}
	return out.Lease
}

// key makes a key of op that ended in state (processing: still held) and returns its id.
func (b *bundle) key(op, key string, state claim.State) int64 {
	b.t.Helper()
	l := b.claimKey(op, key)
	var err error
	switch state {
	case claim.StateProcessing:
	case claim.StateCompleted:
		err = b.store.Complete(b.ctx, nil, l, &claim.Snapshot{Status: 201, Body: []byte(`{"id":"r-` + key + `"}`),
			ResourceID: "r-" + key, Headers: map[string]string{"Content-Type": "application/json"}})
	case claim.StateFailedFinal:
		err = b.store.Fail(b.ctx, nil, l, claim.FinalFailure("declined", "card declined",
			&claim.Snapshot{Status: 402, Body: []byte(`{"error":"declined"}`)}))
	case claim.StateFailedRetryable:
		err = b.store.Fail(b.ctx, nil, l, claim.RetryableFailure("timeout", "upstream timed out"))
	}
	if err != nil {
		b.t.Fatal(err)
	}
	return l.KeyID
}

// age moves a key's timestamps back by d, as if it had ended d ago.
func (b *bundle) age(id int64, d time.Duration) {
	b.t.Helper()
	pgtest.Exec(b.t, b.db, `UPDATE idempotency_keys SET created_at = created_at - ? * interval '1 second',
		updated_at = updated_at - ? * interval '1 second', completed_at = completed_at - ? * interval '1 second',
		response_expires_at = response_expires_at - ? * interval '1 second', expires_at = expires_at - ? * interval '1 second'
		WHERE id = ?`, d.Seconds(), d.Seconds(), d.Seconds(), d.Seconds(), d.Seconds(), id)
}

func (b *bundle) count(sql string, args ...any) int64 {
	b.t.Helper()
	var n int64
	if err := b.db.Raw(sql, args...).Scan(&n).Error; err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (b *bundle) exists(id int64) bool {
	return b.count(`SELECT count(*) FROM idempotency_keys WHERE id = ?`, id) == 1
}

func (b *bundle) hasResponse(id int64) bool {
	return b.count(`SELECT count(*) FROM idempotency_keys k JOIN key_responses r ON r.key_id = k.id AND r.day = k.response_day WHERE k.id = ?`, id) == 1
}

func (b *bundle) purge(opts retention.Options) *retention.Report {
	b.t.Helper()
	if opts.Actor == "" {
		opts.Actor = "operator:test"
	}
	rep, err := b.job.Purge(b.ctx, opts, nil)
	if err != nil {
		b.t.Fatalf("purge: %v", err)
	}
	return rep
}

// finding records a reconciliation finding on keyID in the given state (open, resolved,
// ignored), in reconciliation's own tables.
func (b *bundle) finding(keyID int64, state string) {
	var runID int64
	if err := b.db.Raw(`INSERT INTO recon_runs (channel, actor) VALUES ('paysim', 'daemon') RETURNING id`).Scan(&runID).Error; err != nil {
		b.t.Fatal(err)
	}
	pgtest.Exec(b.t, b.db, `INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, key_id, state)
		VALUES (?, ?, 'paysim', current_date, 'LOCAL_ONLY', ?, ?, ?)`, runID, runID, fmt.Sprintf("key:%d", keyID), keyID, state)
}

// seedExpired inserts n ended keys of op directly (data set-up for volume; the claim path is
// exercised by the tests' own keys), each with eventsPerKey events, ended endedAgo ago with the
// claim defaults' periods (72 h response, 30 d key).
func seedExpired(tb testing.TB, db *gorm.DB, op string, n, eventsPerKey int, endedAgo time.Duration) {
	tb.Helper()
	pgtest.Exec(tb, db, `INSERT INTO idempotency_keys (tenant, operation, key, key_digest, fingerprint, fingerprint_version,
		request, state, downstream_key, resource_id, response_day,
		created_at, updated_at, completed_at, response_expires_at, expires_at)
	SELECT 'seed', ?, 'k-' || g, md5('d' || g), md5('f' || g), 1, '{"amount_minor":100}', 'completed',
		md5(? || g), 'r-' || g, (t AT TIME ZONE 'UTC')::date,
		t, t, t, t + interval '72 hours', t + interval '30 days'
	FROM generate_series(1, ?) g, LATERAL (SELECT now() - ? * interval '1 second' - g * interval '1 millisecond' AS t) ts`,
		op, op, n, endedAgo.Seconds())
	// Their answers, in the partitions of the days they were stored (as the claim store writes them).
	var days []string
	if err := db.Raw(`SELECT DISTINCT to_char(response_day, 'YYYY-MM-DD') FROM idempotency_keys WHERE tenant = 'seed' AND operation = ?`, op).
		Scan(&days).Error; err != nil {
		tb.Fatal(err)
	}
	for _, d := range days {
		pgtest.Exec(tb, db, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS key_responses_%s PARTITION OF key_responses
			FOR VALUES FROM ('%s') TO ('%s'::date + 1)`, strings.ReplaceAll(d, "-", ""), d, d))
	}
	pgtest.Exec(tb, db, `INSERT INTO key_responses (key_id, day, status, headers, body)
	SELECT id, response_day, 201, '{"Content-Type":"application/json"}', '{"id":"r"}'::bytea
	FROM idempotency_keys WHERE tenant = 'seed' AND operation = ?`, op)
	if eventsPerKey > 0 {
		pgtest.Exec(tb, db, `INSERT INTO key_events (key_id, kind, actor)
		SELECT k.id, e.kind, 'service:seed' FROM idempotency_keys k
		CROSS JOIN (SELECT (ARRAY['claimed', 'completed', 'replayed'])[1 + (i - 1) % 3] AS kind FROM generate_series(1, ?) i) e
		WHERE k.tenant = 'seed' AND k.operation = ?`, eventsPerKey, op)
	}
}
