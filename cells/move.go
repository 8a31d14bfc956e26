package cells

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/pgpool"
)

// A tenant move (`idemops cells move`) takes a tenant from its cell to another without two
// cells ever accepting it, in steps recorded in the control cell's cell_moves (migration 00140)
// as each completes, so that running the same command again after a crash at any point goes on
// from there:
//
//	recorded      the move has a row; at most one unfinished move per tenant.
//	fenced        target: fence "incoming" (nobody writes the tenant there but the mover);
//	              source: fence "frozen" (no claim inserts a key, no takeover, no operator or
//	              retention write, no consumer's dedup row — claim answers ErrTenantMoving, 503 +
//	              Retry-After), then a wait for every write that may have passed before the
//	              fence (the transactions holding those tables' row lock when it committed).
//	drained       the tenant's live leases ended, or — after the bounded wait (DrainTimeout) —
//	              were revoked, with the expired ones of stalled holders: the mover takes the
//	              token and expires the lease, so the holder's completion fails as lease lost
//	              (nothing written) and the key, copied as processing, is taken over in the
//	              target with a downstream lookup first, as after a crash. A revoked key's
//	              lease_owner is RevokedBy: nobody holds its token, so the keys' fence judges
//	              every later write of it (migration 00144). The freeze window runs from the
//	              source's fence to the switch.
//	copied        the source's fence sealed (migration 00152: from now on no write of the
//	              tenant's rows of any moved table — the demo's orders and payments, a key's
//	              events, outbox rows, answer counts — is taken; until now they were, and they
//	              are in the copy), the writes under way waited out; then every moved table's
//	              rows of the tenant, source → target, with their ids, through COPY in one
//	              target transaction (a crash copies again from scratch).
//	verified      per table, the row count and a checksum (md5 over the rows in key order) agree.
//	switched      source fence "gone" (moved_to the target), target fence lifted, the map file
//	              rewritten (atomically), an audit row in the control cell.
//	done          the tenant's rows deleted from the source; the "gone" fence stays, for services
//	              still holding the old map (their refusal names the new cell; they re-read it).
type Step string

// The steps, in order.
const (
	StepRecorded Step = "recorded"
	StepFenced   Step = "fenced"
	StepDrained  Step = "drained"
	StepCopied   Step = "copied"
	StepVerified Step = "verified"
	StepSwitched Step = "switched"
	StepDone     Step = "done"
	// StepAborted: AbortMove gave the move up before its switch.
	StepAborted Step = "aborted"
)

var steps = []Step{StepRecorded, StepFenced, StepDrained, StepCopied, StepVerified, StepSwitched, StepDone}

func (s Step) index() int {
	for i, x := range steps {
		if x == s {
			return i
		}
	}
	return -1
}

// ErrMoveRefused: the move as asked cannot start (unknown tenant or cell, the tenant's own
// cell, another move of the tenant under way). Nothing was changed; the CLI exits 2.
var ErrMoveRefused = errs.New(errs.Invalid, "move refused")

// ErrStopped is returned when MoveConfig.StopAfter stopped the move (tests: a crash after a step).
var ErrStopped = errors.New("move stopped after the requested step")

// MoveConfig is one move.
type MoveConfig struct {
	// Map is the map as it stands; its File is rewritten at the switch.
	Map    *Map
	Tenant string
	To     string
	// DrainTimeout bounds the wait for the tenant's live leases to end (default 10 s); those
	// left are revoked (see StepDrained).
	DrainTimeout time.Duration
	// Audit records the switch (action "cells.move") or an abort ("cells.move.abort") in the
	// control cell's audit log, in tx — the transaction that records the step, so exactly once.
	// (cells stands below the audit package: the caller brings it.) Nil: not audited.
	Audit func(ctx context.Context, tx *gorm.DB, action string, detail map[string]any) error
	// Moved, when set, runs once this run finished the move (step done): what the caller keeps
	// derived from the cells' rows — the dashboard's per-minute key counts — is refolded in
	// both cells there. (A crash between done and Moved leaves that to the next fold.)
	Moved func(ctx context.Context, from, to string) error
	// Progress gets one line per step (nil: none).
	Progress io.Writer
	// StopAfter stops the move with ErrStopped once this step is recorded (a crash, for tests).
	StopAfter Step
	// Connect opens a connection to a cell's database (default pgx.Connect); OpenControl opens
	// the control cell's pool (default pgpool.Open, the project's pool opener).
	Connect     func(ctx context.Context, url string) (*pgx.Conn, error)
	OpenControl func(url string) (*gorm.DB, error)
}

// MoveResult is what a finished move reports.
type MoveResult struct {
	Tenant, From, To string
	Counts           map[string]int64 // rows copied per table
	Keys             int64
	Revoked          int           // live leases revoked after the wait
	Elapsed          time.Duration // from the first run's start to the end (resumes included)
	FreezeWindow     time.Duration // from the tenant's freeze to the switch
}

// moveRow is a cell_moves row.
type moveRow struct {
	ID         int64
	Tenant     string
	FromCell   string
	ToCell     string
	Step       Step
	Counts     []byte
	Checksums  []byte
	Revoked    int
	StartedAt  time.Time
	FrozenAt   *time.Time
	SwitchedAt *time.Time
	FinishedAt *time.Time
}

// mover is one run of a move.
type mover struct {
	cfg            MoveConfig
	row            moveRow
	control        *gorm.DB
	source, target *pgx.Conn
	from, to       CellSpec
	lit            string // the tenant as a SQL literal
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMoveRefused, fmt.Sprintf(format, args...))
}

// Move moves cfg.Tenant to cell cfg.To, or continues the move of it that a run before this one
// left unfinished (recorded in the control cell). It refuses (ErrMoveRefused) an unknown tenant
// or cell, a tenant already in cfg.To, a second move of a tenant whose move to another cell is
// under way, and a move whose rows' ids the target already holds (databases that held keys
// before they were cells).
func Move(ctx context.Context, cfg MoveConfig) (*MoveResult, error) {
	mv, closeAll, err := openMove(ctx, cfg, false)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	for mv.row.Step != StepDone {
		if cfg.StopAfter != "" && mv.row.Step == cfg.StopAfter {
			return nil, ErrStopped
		}
		t0 := time.Now()
		var next Step
		var note string
		switch mv.row.Step {
		case StepRecorded:
			next, note, err = StepFenced, "", mv.fence(ctx)
		case StepFenced:
			next = StepDrained
			note, err = mv.drain(ctx)
		case StepDrained:
			next = StepCopied
			note, err = mv.copy(ctx)
		case StepCopied:
			next = StepVerified
			note, err = mv.verify(ctx)
		case StepVerified:
			next = StepSwitched
			note, err = mv.switchOver(ctx)
		case StepSwitched:
			next = StepDone
			note, err = mv.cleanup(ctx)
		default:
			return nil, fmt.Errorf("move of %q is at an unknown step %q", cfg.Tenant, mv.row.Step)
		}
		if err != nil {
			return nil, fmt.Errorf("move %s %s→%s: %s: %w", cfg.Tenant, mv.from.Name, mv.to.Name, next, err)
		}
		mv.progress("%s %s (%s)%s", cfg.Tenant, next, time.Since(t0).Round(time.Millisecond), note)
		if next == StepDone && cfg.Moved != nil {
			if err := cfg.Moved(ctx, mv.from.Name, mv.to.Name); err != nil {
				return nil, fmt.Errorf("move %s %s→%s: after the move: %w", cfg.Tenant, mv.from.Name, mv.to.Name, err)
			}
		}
	}
	return mv.result()
}

// AbortMove gives up the tenant's unfinished move before its switch: the tenant's rows copied
// to the target are deleted, both fences lifted (the tenant is served by its cell again), and
// the move recorded as aborted. After the switch a move can only be finished (Move), or undone
// by moving the tenant back.
func AbortMove(ctx context.Context, cfg MoveConfig) error {
	mv, closeAll, err := openMove(ctx, cfg, true)
	if err != nil {
		return err
	}
	defer closeAll()
	if mv.row.Step.index() >= StepSwitched.index() {
		return refused("the move of tenant %q to %s is past its switch (step %s): run it to its end instead", cfg.Tenant, mv.to.Name, mv.row.Step)
	}
	if err := mv.inMove(ctx, mv.target, func(tx pgx.Tx) error { return mv.deleteRows(ctx, tx) }); err != nil {
		return fmt.Errorf("cell %s: %w", mv.to.Name, err)
	}
	if _, err := mv.target.Exec(ctx, `DELETE FROM cell_fences WHERE tenant = $1 AND state = $2`, cfg.Tenant, claim.FenceIncoming); err != nil {
		return fmt.Errorf("cell %s: lift the fence: %w", mv.to.Name, err)
	}
	if _, err := mv.source.Exec(ctx, `DELETE FROM cell_fences WHERE tenant = $1 AND state = $2`, cfg.Tenant, claim.FenceFrozen); err != nil {
		return fmt.Errorf("cell %s: lift the fence: %w", mv.from.Name, err)
	}
	err = mv.control.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := mv.advance(ctx, tx, StepAborted, "finished_at = now()"); err != nil {
			return err
		}
		return mv.audit(ctx, tx, "cells.move.abort", map[string]any{"from": mv.from.Name, "to": mv.to.Name, "move_id": mv.row.ID})
	})
	if err != nil {
		return err
	}
	mv.progress("%s aborted: served by %s again, nothing left in %s", cfg.Tenant, mv.from.Name, mv.to.Name)
	return nil
}

// openMove opens what a run of a move needs — the control cell, the run's lock, the move's row
// (recorded when new, unless existing is set: then it must be there), both cells — and returns
// the function closing them.
func openMove(ctx context.Context, cfg MoveConfig, existing bool) (mv *mover, closeAll func(), err error) {
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.Connect == nil {
		cfg.Connect = connectUTC
	}
	if cfg.OpenControl == nil {
		cfg.OpenControl = pgpool.Open
	}
	m := cfg.Map
	if _, ok := m.Cell(cfg.To); !ok && !existing {
		return nil, nil, refused("no cell %q in the map", cfg.To)
	}
	var closers []func()
	closeEach := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeEach()
		}
	}()
	control, _ := m.Cell(m.Control())
	cdb, err := cfg.OpenControl(control.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("control cell %s: %w", control.Name, err)
	}
	sqlDB, err := cdb.DB()
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { sqlDB.Close() })
	// One run of a tenant's move at a time: a session lock held on its own connection to the
	// control cell for the run (released when it ends, or dies).
	lock, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("control cell %s: %w", control.Name, err)
	}
	closers = append(closers, func() { lock.Close() })
	var mine bool
	if err := lock.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(hashtext('idemops cell move'), hashtext($1))`, cfg.Tenant).Scan(&mine); err != nil {
		return nil, nil, fmt.Errorf("control cell %s: %w", control.Name, err)
	}
	if !mine {
		return nil, nil, refused("another run of the move of tenant %q is under way", cfg.Tenant)
	}
	closers = append(closers, func() {
		lock.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('idemops cell move'), hashtext($1))`, cfg.Tenant) //nolint:errcheck
	})
	mv = &mover{cfg: cfg, control: cdb, lit: quoteLiteral(cfg.Tenant)}
	if err := mv.record(ctx, existing); err != nil {
		return nil, nil, err
	}
	mv.from, _ = m.Cell(mv.row.FromCell)
	mv.to, _ = m.Cell(mv.row.ToCell)
	if mv.from.Name == "" || mv.to.Name == "" {
		return nil, nil, fmt.Errorf("the unfinished move of %q names cell %s or %s, which the map no longer has", cfg.Tenant, mv.row.FromCell, mv.row.ToCell)
	}
	if mv.source, err = cfg.Connect(ctx, mv.from.URL); err != nil {
		return nil, nil, fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	closers = append(closers, func() { mv.source.Close(context.WithoutCancel(ctx)) })
	if mv.target, err = cfg.Connect(ctx, mv.to.URL); err != nil {
		return nil, nil, fmt.Errorf("cell %s: %w", mv.to.Name, err)
	}
	closers = append(closers, func() { mv.target.Close(context.WithoutCancel(ctx)) })
	return mv, closeEach, nil
}

func (mv *mover) audit(ctx context.Context, tx *gorm.DB, action string, detail map[string]any) error {
	if mv.cfg.Audit == nil {
		return nil
	}
	return mv.cfg.Audit(ctx, tx, action, detail)
}

func (mv *mover) progress(format string, args ...any) {
	if mv.cfg.Progress != nil {
		fmt.Fprintf(mv.cfg.Progress, "move "+format+"\n", args...)
	}
}

// connectUTC connects with the session's time zone UTC, so that both cells write timestamps
// alike in the checksums.
func connectUTC(ctx context.Context, url string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cc.RuntimeParams["timezone"] = "UTC"
	return pgx.ConnectConfig(ctx, cc)
}

const moveColumns = `id, tenant, from_cell, to_cell, step, counts, checksums, revoked, started_at, frozen_at, switched_at, finished_at`

// record finds the tenant's unfinished move, or records a new one (unless existing).
func (mv *mover) record(ctx context.Context, existing bool) error {
	cfg, m := mv.cfg, mv.cfg.Map
	return mv.control.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []moveRow
		if err := tx.Raw(`SELECT `+moveColumns+` FROM cell_moves WHERE tenant = ? AND finished_at IS NULL`, cfg.Tenant).Scan(&rows).Error; err != nil {
			return fmt.Errorf("read cell_moves: %w", err)
		}
		if len(rows) == 0 && existing {
			return refused("no move of tenant %q is under way", cfg.Tenant)
		}
		if len(rows) == 1 {
			if rows[0].ToCell != cfg.To && !existing {
				return refused("a move of tenant %q from %s to %s is under way (step %s): run it to its end with --to %s first",
					cfg.Tenant, rows[0].FromCell, rows[0].ToCell, rows[0].Step, rows[0].ToCell)
			}
			mv.row = rows[0]
			mv.progress("%s: continuing the move from %s to %s after step %s", cfg.Tenant, mv.row.FromCell, mv.row.ToCell, mv.row.Step)
			return nil
		}
		from, ok := m.CellOf(cfg.Tenant)
		switch {
		case !ok:
			return refused("tenant %q is in no cell of the map", cfg.Tenant)
		case from == cfg.To:
			return refused("tenant %q is in cell %s already", cfg.Tenant, cfg.To)
		}
		if err := tx.Raw(`INSERT INTO cell_moves (tenant, from_cell, to_cell, step) VALUES (?, ?, ?, ?) RETURNING `+moveColumns,
			cfg.Tenant, from, cfg.To, StepRecorded).Scan(&mv.row).Error; err != nil {
			return fmt.Errorf("record the move: %w", err)
		}
		mv.progress("%s: from %s to %s", cfg.Tenant, from, cfg.To)
		return nil
	})
}

// advance records that the move completed step next, with set's extra assignments (SQL, args).
func (mv *mover) advance(ctx context.Context, tx *gorm.DB, next Step, set string, args ...any) error {
	db := mv.control.WithContext(ctx)
	if tx != nil {
		db = tx
	}
	q := `UPDATE cell_moves SET step = ?, updated_at = now()`
	if set != "" {
		q += ", " + set
	}
	q += ` WHERE id = ? AND step = ? RETURNING ` + moveColumns
	var rows []moveRow
	if err := db.Raw(q, append(append([]any{next}, args...), mv.row.ID, mv.row.Step)...).Scan(&rows).Error; err != nil {
		return fmt.Errorf("record step %s: %w", next, err)
	}
	if len(rows) != 1 {
		return fmt.Errorf("record step %s: the move's row changed under this run (another mover?)", next)
	}
	mv.row = rows[0]
	return nil
}

// inMove runs fn in a transaction on conn in which the fence lets the mover write the tenant.
func (mv *mover) inMove(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('idemops.cell_move', $1, true)`, mv.cfg.Tenant); err != nil {
			return err
		}
		return fn(tx)
	})
}

// setFence puts the tenant's fence in a cell (replacing one there).
func setFence(ctx context.Context, conn *pgx.Conn, tenant, state, movedTo string) error {
	_, err := conn.Exec(ctx, `INSERT INTO cell_fences (tenant, state, moved_to) VALUES ($1, $2, NULLIF($3, ''))
		ON CONFLICT (tenant) DO UPDATE SET state = EXCLUDED.state, moved_to = EXCLUDED.moved_to, since = now()
		WHERE (cell_fences.state, cell_fences.moved_to) IS DISTINCT FROM (EXCLUDED.state, EXCLUDED.moved_to)`, tenant, state, movedTo)
	if err != nil {
		return fmt.Errorf("fence %s: %w", state, err)
	}
	return nil
}

// fence fences the target (incoming), then the source (frozen), then waits out every write to
// idempotency_keys that was under way in the source when its fence committed: a claim that read
// no fence in its statement holds the table's row lock until it commits, and any statement that
// takes the lock later reads the fence (its snapshot is taken after the lock).
func (mv *mover) fence(ctx context.Context) error {
	if err := mv.idsFree(ctx); err != nil {
		return err
	}
	if err := setFence(ctx, mv.target, mv.cfg.Tenant, claim.FenceIncoming, ""); err != nil {
		return fmt.Errorf("cell %s: %w", mv.to.Name, err)
	}
	if err := setFence(ctx, mv.source, mv.cfg.Tenant, claim.FenceFrozen, ""); err != nil {
		return fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	if err := waitForWriters(ctx, mv.source, mv.cfg.DrainTimeout, "idempotency_keys", "consumed_messages"); err != nil {
		return fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	return mv.advance(ctx, nil, StepFenced, "frozen_at = COALESCE(frozen_at, now())")
}

// idsFree refuses, before anything is fenced, a move whose keys' ids the target already uses:
// rows made before the databases were cells (Open keeps each cell's new ids in its own range)
// would fail the copy with the tenant frozen. The check is the range of the tenant's key ids.
func (mv *mover) idsFree(ctx context.Context) error {
	var lo, hi *int64
	if err := mv.source.QueryRow(ctx, `SELECT min(id), max(id) FROM idempotency_keys WHERE tenant = $1`, mv.cfg.Tenant).Scan(&lo, &hi); err != nil {
		return fmt.Errorf("cell %s: key ids: %w", mv.from.Name, err)
	}
	if lo == nil {
		return nil
	}
	var taken int64
	if err := mv.target.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE id BETWEEN $1 AND $2 AND tenant <> $3`,
		*lo, *hi, mv.cfg.Tenant).Scan(&taken); err != nil {
		return fmt.Errorf("cell %s: key ids: %w", mv.to.Name, err)
	}
	if taken > 0 {
		return refused("%d keys of cell %s have ids among tenant %q's (%d..%d in %s): both databases held keys before they were cells; "+
			"the move would fail with the tenant frozen (give it up: --abort)", taken, mv.to.Name, mv.cfg.Tenant, *lo, *hi, mv.from.Name)
	}
	return nil
}

// waitForWriters waits until every transaction that holds a write lock on tables now has ended
// (PostgreSQL's own wait of CREATE INDEX CONCURRENTLY, by polling pg_locks), at most limit.
func waitForWriters(ctx context.Context, conn *pgx.Conn, limit time.Duration, tables ...string) error {
	var vxids []string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND relation = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
		  AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid()`, tables).Scan(&vxids); err != nil {
		return fmt.Errorf("writers of %s: %w", strings.Join(tables, ", "), err)
	}
	deadline := time.Now().Add(limit)
	for wait := time.Millisecond; len(vxids) > 0; wait = min(wait*2, 50*time.Millisecond) {
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(DISTINCT virtualtransaction) FROM pg_locks WHERE virtualtransaction = ANY($1)`, vxids).Scan(&left); err != nil {
			return fmt.Errorf("writers of %s: %w", strings.Join(tables, ", "), err)
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d transactions writing the tenant tables since before the fence still open after %s; run the move again", left, limit)
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// liveLeases counts the tenant's keys a holder still works on (a parked key — no token — has
// nobody to wait for).
const liveLeases = `SELECT count(*) FROM idempotency_keys WHERE tenant = $1 AND state = 'processing'
	AND lease_token IS NOT NULL AND lease_expires_at > now()`

// RevokedBy is the lease_owner of a key whose lease the mover revoked. The keys' fence leaves
// the writes of a key with a lease to its holder, unchecked (the claim path), but judges every
// write of a key with this owner — nobody holds its token (migration 00144 names it too).
const RevokedBy = "cells-move"

// drain waits, at most DrainTimeout, for the tenant's live leases to end, then revokes every
// lease left — the live ones and the expired ones nobody took over (a stalled holder still holds
// its token, and a holder's completion is judged by its token, not the clock): a new token
// nobody holds and an expired lease, so the holder's writes fail (lease lost) and the target's
// reclaimer takes the key over, looking downstream up first.
func (mv *mover) drain(ctx context.Context) (string, error) {
	deadline := time.Now().Add(mv.cfg.DrainTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		var live int
		if err := mv.source.QueryRow(ctx, liveLeases, mv.cfg.Tenant).Scan(&live); err != nil {
			return "", fmt.Errorf("live leases: %w", err)
		}
		if live == 0 || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, wait); err != nil {
			return "", err
		}
	}
	var revoked int64
	err := mv.inMove(ctx, mv.source, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE idempotency_keys SET lease_token = gen_random_uuid(), lease_owner = $2,
			lease_expires_at = LEAST(lease_expires_at, now()), version = version + 1, updated_at = now()
			WHERE tenant = $1 AND state = 'processing' AND lease_token IS NOT NULL AND lease_owner IS DISTINCT FROM $2`, mv.cfg.Tenant, RevokedBy)
		revoked = tag.RowsAffected()
		return err
	})
	if err != nil {
		return "", fmt.Errorf("revoke live leases: %w", err)
	}
	if err := mv.advance(ctx, nil, StepDrained, "revoked = revoked + ?", revoked); err != nil {
		return "", err
	}
	if revoked > 0 {
		return fmt.Sprintf(": %d leases left after the %s wait (live or stalled) were revoked (taken over in %s)", revoked, mv.cfg.DrainTimeout, mv.to.Name), nil
	}
	return "", nil
}

// seal makes the source's frozen fence refuse every write of the tenant's rows of the moved
// tables (migration 00152; until now a lease holder finishing, or a writer that is not one — a
// webhook's order transition, a key's answer counts — could still write them, and that was in
// the copy), then waits out the writes under way: every write after the copy's snapshot would
// be left behind and deleted with the source's rows. Idempotent: every copy seals first.
func (mv *mover) seal(ctx context.Context) error {
	if _, err := mv.source.Exec(ctx, `UPDATE cell_fences SET sealed = true WHERE tenant = $1 AND state = $2 AND NOT sealed`,
		mv.cfg.Tenant, claim.FenceFrozen); err != nil {
		return fmt.Errorf("cell %s: seal the fence: %w", mv.from.Name, err)
	}
	tables := make([]string, len(movedTables))
	for i, t := range movedTables {
		tables[i] = t.Name
	}
	if err := waitForWriters(ctx, mv.source, mv.cfg.DrainTimeout, tables...); err != nil {
		return fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	return nil
}

// copy copies every moved table's rows of the tenant from the source (one snapshot, after the
// seal) into the target (one transaction, which first deletes what an earlier attempt may have
// left).
func (mv *mover) copy(ctx context.Context) (string, error) {
	start := time.Now()
	if err := mv.seal(ctx); err != nil {
		return "", err
	}
	sealed := time.Since(start)
	counts := map[string]int64{}
	src, err := mv.source.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return "", fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	defer src.Rollback(context.WithoutCancel(ctx))
	err = mv.inMove(ctx, mv.target, func(dst pgx.Tx) error {
		if err := mv.deleteRows(ctx, dst); err != nil {
			return fmt.Errorf("cell %s: %w", mv.to.Name, err)
		}
		if err := mv.responseDays(ctx, src, dst); err != nil {
			return err
		}
		for _, t := range movedTables {
			n, err := mv.copyTable(ctx, src, dst, t)
			if err != nil {
				return fmt.Errorf("copy %s: %w", t.Name, err)
			}
			counts[t.Name] = n
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(counts)
	if err := mv.advance(ctx, nil, StepCopied, "counts = ?::jsonb", string(b)); err != nil {
		return "", err
	}
	return fmt.Sprintf(": %d keys, %d rows (sealed and writers waited out in %s)", counts["idempotency_keys"], sum(counts),
		sealed.Round(time.Millisecond)), nil
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// deleteRows deletes the tenant's rows of every moved table in tx (children first).
func (mv *mover) deleteRows(ctx context.Context, tx pgx.Tx) error {
	for i := len(movedTables) - 1; i >= 0; i-- {
		t := movedTables[i]
		if _, err := tx.Exec(ctx, `DELETE FROM `+t.Name+` WHERE `+t.where(mv.lit)); err != nil {
			return fmt.Errorf("delete %s: %w", t.Name, err)
		}
	}
	return nil
}

// responseDays makes the target's key_responses partitions for the days of the tenant's
// answers. A day the target's retention already dropped is not made again: those answers are
// left behind (the keys read as expired there, as the target's own keys of that day do).
func (mv *mover) responseDays(ctx context.Context, src, dst pgx.Tx) error {
	rows, err := src.Query(ctx, `SELECT DISTINCT day FROM key_responses WHERE `+fmt.Sprintf(keysOf, mv.lit)+` ORDER BY day`)
	if err != nil {
		return fmt.Errorf("answer days: %w", err)
	}
	days, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return fmt.Errorf("answer days: %w", err)
	}
	for _, day := range days {
		var dropped bool
		if err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT FROM key_response_drops WHERE day = $1)`, day).Scan(&dropped); err != nil {
			return err
		}
		if dropped {
			continue
		}
		if _, err := dst.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF key_responses FOR VALUES FROM ('%s') TO ('%s')`,
			claim.ResponsePartition(day), day.Format(time.DateOnly), day.AddDate(0, 0, 1).Format(time.DateOnly))); err != nil {
			return fmt.Errorf("response partition of %s: %w", day.Format(time.DateOnly), err)
		}
	}
	return nil
}

// copyTable streams t's rows of the tenant from src into dst through COPY (binary: both cells
// run the same schema, checked first).
func (mv *mover) copyTable(ctx context.Context, src, dst pgx.Tx, t movedTable) (int64, error) {
	ss, err := shapeOf(ctx, src.Conn(), t.Name)
	if err != nil {
		return 0, err
	}
	ds, err := shapeOf(ctx, dst.Conn(), t.Name)
	if err != nil {
		return 0, err
	}
	if err := sameShape(t.Name, ss, ds); err != nil {
		return 0, err
	}
	cols := strings.Join(ss.Columns, ", ")
	where := t.where(mv.lit)
	if t.Name == "key_responses" {
		// The days the target dropped, read there: the source's COPY cannot see the target.
		var dropped []time.Time
		rows, err := dst.Query(ctx, `SELECT day FROM key_response_drops`)
		if err == nil {
			dropped, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
		}
		if err != nil {
			return 0, fmt.Errorf("dropped answer days: %w", err)
		}
		for _, d := range dropped {
			where += fmt.Sprintf(" AND day <> '%s'", d.Format(time.DateOnly))
		}
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := src.Conn().PgConn().CopyTo(ctx, pw, fmt.Sprintf(`COPY (SELECT %s FROM %s WHERE %s) TO STDOUT (FORMAT binary)`, cols, t.Name, where))
		pw.CloseWithError(err)
		done <- err
	}()
	tag, err := dst.Conn().PgConn().CopyFrom(ctx, pr, fmt.Sprintf(`COPY %s (%s) FROM STDIN (FORMAT binary)`, t.Name, cols))
	pr.CloseWithError(err) // unblocks the reader's side if the target failed first
	if rerr := <-done; rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// tableSum is a table's rows of the tenant in one cell: how many, and an md5 over them in key
// order.
type tableSum struct {
	Rows int64  `json:"rows"`
	MD5  string `json:"md5"`
}

func (mv *mover) sums(ctx context.Context, conn *pgx.Conn, dropped string) (map[string]tableSum, error) {
	out := map[string]tableSum{}
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, t := range movedTables {
			s, err := shapeOf(ctx, conn, t.Name)
			if err != nil {
				return err
			}
			where := t.where(mv.lit)
			if t.Name == "key_responses" {
				where += dropped
			}
			var ts tableSum
			if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), COALESCE(md5(string_agg(md5(r::text), '' ORDER BY %s)), '')
				FROM (SELECT %s FROM %s WHERE %s) r`, strings.Join(s.Key, ", "), strings.Join(s.Columns, ", "), t.Name, where)).Scan(&ts.Rows, &ts.MD5); err != nil {
				return fmt.Errorf("checksum of %s: %w", t.Name, err)
			}
			out[t.Name] = ts
		}
		return nil
	})
	return out, err
}

// verify compares every moved table's count and checksum in the two cells. A difference sends
// the move back to copy again (the next run), and names the table.
func (mv *mover) verify(ctx context.Context) (string, error) {
	var dropped []string
	rows, err := mv.target.Query(ctx, `SELECT day::text FROM key_response_drops`)
	if err == nil {
		dropped, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return "", fmt.Errorf("cell %s: %w", mv.to.Name, err)
	}
	skip := ""
	for _, d := range dropped {
		skip += fmt.Sprintf(" AND day <> '%s'", d)
	}
	src, err := mv.sums(ctx, mv.source, skip)
	if err != nil {
		return "", fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	dst, err := mv.sums(ctx, mv.target, skip)
	if err != nil {
		return "", fmt.Errorf("cell %s: %w", mv.to.Name, err)
	}
	for _, t := range movedTables {
		if src[t.Name] != dst[t.Name] {
			if err := mv.advance(ctx, nil, StepDrained, ""); err != nil {
				return "", err
			}
			return "", fmt.Errorf("table %s differs after the copy: %d rows md5 %s in %s, %d rows md5 %s in %s; run the move again to copy again",
				t.Name, src[t.Name].Rows, src[t.Name].MD5, mv.from.Name, dst[t.Name].Rows, dst[t.Name].MD5, mv.to.Name)
		}
	}
	b, _ := json.Marshal(src)
	if err := mv.advance(ctx, nil, StepVerified, "checksums = ?::jsonb", string(b)); err != nil {
		return "", err
	}
	return fmt.Sprintf(": %d tables agree", len(src)), nil
}

// switchOver hands the tenant to the target: the source refuses it for good (gone, naming the
// target) before the target accepts it, so no moment has two cells accepting it; then the map
// file, then the audit row with the step's record, in one control transaction (exactly once).
func (mv *mover) switchOver(ctx context.Context) (string, error) {
	if err := setFence(ctx, mv.source, mv.cfg.Tenant, claim.FenceGone, mv.to.Name); err != nil {
		return "", fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	if _, err := mv.target.Exec(ctx, `DELETE FROM cell_fences WHERE tenant = $1`, mv.cfg.Tenant); err != nil {
		return "", fmt.Errorf("cell %s: lift the fence: %w", mv.to.Name, err)
	}
	m := mv.cfg.Map
	if cur, _ := m.CellOf(mv.cfg.Tenant); cur != mv.to.Name {
		next, err := m.WithTenantIn(mv.cfg.Tenant, mv.to.Name)
		if err != nil {
			return "", err
		}
		if err := Write(m.File, next); err != nil {
			return "", err
		}
		mv.cfg.Map = next
	}
	var counts map[string]int64
	_ = json.Unmarshal(mv.row.Counts, &counts)
	err := mv.control.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := mv.advance(ctx, tx, StepSwitched, "switched_at = now()"); err != nil {
			return err
		}
		return mv.audit(ctx, tx, "cells.move", map[string]any{"from": mv.from.Name, "to": mv.to.Name,
			"keys": counts["idempotency_keys"], "rows": sum(counts), "revoked": mv.row.Revoked, "move_id": mv.row.ID})
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(": %s gone from %s, accepted by %s, map %s rewritten", mv.cfg.Tenant, mv.from.Name, mv.to.Name, m.File), nil
}

// cleanup deletes the tenant's rows from the source; its "gone" fence stays.
func (mv *mover) cleanup(ctx context.Context) (string, error) {
	if err := mv.inMove(ctx, mv.source, func(tx pgx.Tx) error { return mv.deleteRows(ctx, tx) }); err != nil {
		return "", fmt.Errorf("cell %s: %w", mv.from.Name, err)
	}
	if err := mv.advance(ctx, nil, StepDone, "finished_at = now()"); err != nil {
		return "", err
	}
	return fmt.Sprintf(": rows deleted from %s", mv.from.Name), nil
}

func (mv *mover) result() (*MoveResult, error) {
	r := &MoveResult{Tenant: mv.row.Tenant, From: mv.row.FromCell, To: mv.row.ToCell, Revoked: mv.row.Revoked}
	if err := json.Unmarshal(mv.row.Counts, &r.Counts); err != nil {
		return nil, fmt.Errorf("move counts: %w", err)
	}
	r.Keys = r.Counts["idempotency_keys"]
	if mv.row.FinishedAt != nil {
		r.Elapsed = mv.row.FinishedAt.Sub(mv.row.StartedAt)
	}
	if mv.row.FrozenAt != nil && mv.row.SwitchedAt != nil {
		r.FreezeWindow = mv.row.SwitchedAt.Sub(*mv.row.FrozenAt)
	}
	return r, nil
}
