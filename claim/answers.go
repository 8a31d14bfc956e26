package claim

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"gorm.io/gorm"
)

// AnswerKind names an answer a key's client got from the stored record without an execution.
type AnswerKind string

const (
	// AnswerReplay: the stored response was replayed (Idempotent-Replayed: true).
	AnswerReplay AnswerKind = "replay"
	// AnswerInProgress: another attempt held the key (HTTP 409).
	AnswerInProgress AnswerKind = "in_progress"
	// AnswerMismatch: the key was reused with a different request (HTTP 422).
	AnswerMismatch AnswerKind = "mismatch"
)

// Counter is what AnswerRecorder counts into (a prometheus.Counter fits).
type Counter interface{ Add(float64) }

// AnswerRecorderConfig tunes an AnswerRecorder; zero values take the defaults.
type AnswerRecorderConfig struct {
	// MaxPending bounds the distinct (key, kind, status) records held between flushes (default
	// 10000). A repeat of a held record only counts; a new one beyond the bound is dropped.
	MaxPending int
	// FlushEvery is how often held records are written (default 1 s).
	FlushEvery time.Duration
	// BatchSize bounds the rows of one INSERT (default 1000); FlushTimeout one flush (default 5 s).
	BatchSize    int
	FlushTimeout time.Duration
	// Dropped counts answers not recorded because the buffer was full or a flush failed.
	Dropped Counter
	Logger  *slog.Logger
}

func (c AnswerRecorderConfig) withDefaults() AnswerRecorderConfig {
	if c.MaxPending <= 0 {
		c.MaxPending = 10000
	}
	if c.FlushEvery <= 0 {
		c.FlushEvery = time.Second
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1000
	}
	if c.FlushTimeout <= 0 {
		c.FlushTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

type answerKey struct {
	keyID  int64
	kind   AnswerKind
	status int
}

type answerAgg struct {
	count       int64
	first, last time.Time
}

// AnswerRecorder records the answers clients get from a key's stored record (replays, 409s,
// 422s) so that the console's key page can show them, without adding a commit or a round trip
// to the answering path: Record only counts into a bounded in-memory buffer, and a background
// loop writes what it holds every FlushEvery in batches, aggregated per key, kind and status
// (key_answers). The records of the last moments before a crash are lost; that is the price of
// keeping them off the answering path. A nil *AnswerRecorder records nothing.
type AnswerRecorder struct {
	db      *gorm.DB
	cfg     AnswerRecorderConfig
	mu      sync.Mutex
	pending map[answerKey]*answerAgg
	dropped int64
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started bool
}

// NewAnswerRecorder returns a recorder writing to db; Start begins its flush loop.
func NewAnswerRecorder(db *gorm.DB, cfg AnswerRecorderConfig) *AnswerRecorder {
	return &AnswerRecorder{db: db, cfg: cfg.withDefaults(), pending: map[answerKey]*answerAgg{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Record notes one answer for keyID: kind and the HTTP status the client got (for gRPC, the
// HTTP status of the same answer). It never blocks on the database.
func (r *AnswerRecorder) Record(keyID int64, kind AnswerKind, status int) {
	if r == nil || keyID == 0 {
		return
	}
	now := time.Now()
	k := answerKey{keyID, kind, status}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.pending[k]; ok {
		a.count++
		a.last = now
		return
	}
	if len(r.pending) >= r.cfg.MaxPending {
		r.dropped++
		if r.cfg.Dropped != nil {
			r.cfg.Dropped.Add(1)
		}
		return
	}
	r.pending[k] = &answerAgg{count: 1, first: now, last: now}
}

// Pending is the number of distinct records held for the next flush.
func (r *AnswerRecorder) Pending() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Dropped is the number of answers not recorded (buffer full, or a flush that failed).
func (r *AnswerRecorder) Dropped() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Start runs the flush loop until Stop.
func (r *AnswerRecorder) Start() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return
	}
	r.started = true
	go r.loop()
}

// Stop ends the flush loop and writes what is held (bounded by FlushTimeout).
func (r *AnswerRecorder) Stop() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		close(r.stop)
		r.mu.Lock()
		started := r.started
		r.mu.Unlock()
		if started {
			<-r.done
			return
		}
		_ = r.Flush(context.Background())
	})
}

func (r *AnswerRecorder) loop() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			_ = r.Flush(context.Background())
			return
		case <-t.C:
			_ = r.Flush(context.Background())
		}
	}
}

// flushSQL adds a batch to key_answers: counts add up, the first and last moments widen. Rows
// of keys already gone (a first attempt released, a key purged) are left out, so the table holds
// no orphans; the batch comes sorted by the primary key, so concurrent flushers lock in one order.
const flushSQL = `INSERT INTO key_answers (key_id, kind, status, count, first_at, last_at)
SELECT u.key_id, u.kind, u.status, u.n, u.first_at, u.last_at
FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::timestamptz[], $6::timestamptz[])
     AS u(key_id, kind, status, n, first_at, last_at)
WHERE EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = u.key_id)
ORDER BY u.key_id, u.kind, u.status
ON CONFLICT (key_id, kind, status) DO UPDATE SET count = key_answers.count + excluded.count,
    first_at = LEAST(key_answers.first_at, excluded.first_at), last_at = GREATEST(key_answers.last_at, excluded.last_at)`

// Flush writes what is held now, in batches of BatchSize. Records of a batch that fails are
// dropped (counted), not retried: the buffer stays bounded while the database is away.
func (r *AnswerRecorder) Flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	held := r.pending
	r.pending = make(map[answerKey]*answerAgg, len(held))
	r.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	keys := make([]answerKey, 0, len(held))
	for k := range held {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.keyID != b.keyID {
			return a.keyID < b.keyID
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.status < b.status
	})
	ctx, cancel := context.WithTimeout(ctx, r.cfg.FlushTimeout)
	defer cancel()
	var firstErr error
	for start := 0; start < len(keys); start += r.cfg.BatchSize {
		batch := keys[start:min(start+r.cfg.BatchSize, len(keys))]
		ids, kinds, statuses, counts := make([]int64, len(batch)), make([]string, len(batch)), make([]int64, len(batch)), make([]int64, len(batch))
		firsts, lasts := make([]time.Time, len(batch)), make([]time.Time, len(batch))
		var n int64
		for i, k := range batch {
			a := held[k]
			ids[i], kinds[i], statuses[i], counts[i], firsts[i], lasts[i] = k.keyID, string(k.kind), int64(k.status), a.count, a.first, a.last
			n += a.count
		}
		// Straight to the driver: pgx encodes the slices as arrays (gorm would expand them).
		_, err := conn(r.db).ExecContext(ctx, flushSQL, ids, kinds, statuses, counts, firsts, lasts)
		if err != nil {
			r.mu.Lock()
			r.dropped += n
			r.mu.Unlock()
			if r.cfg.Dropped != nil {
				r.cfg.Dropped.Add(float64(n))
			}
			r.cfg.Logger.Warn("recording client answers failed; these records are dropped", "records", len(batch), "err", err)
			if firstErr == nil {
				firstErr = fmt.Errorf("flush key answers: %w", err)
			}
		}
	}
	return firstErr
}

// Answer is one kind of answer a key's client got, aggregated.
type Answer struct {
	Kind    AnswerKind
	Status  int
	Count   int64
	FirstAt time.Time
	LastAt  time.Time
}

// Answers returns the recorded answers of a key, the latest first (served by the primary key).
func (s *Store) Answers(ctx context.Context, keyID int64) ([]Answer, error) {
	var out []Answer
	err := s.db.WithContext(ctx).Raw(`SELECT kind, status, count, first_at, last_at FROM key_answers
		WHERE key_id = ? ORDER BY last_at DESC LIMIT 100`, keyID).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("answers of key %d: %w", keyID, err)
	}
	return out, nil
}
