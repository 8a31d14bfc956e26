// Package tenantdb is the console's database handle under row-level security (migration 00118):
// every statement and transaction runs for the tenants its context carries (WithTenants, set by
// the console once it knows the operator), so PostgreSQL shows an operator limited to some
// tenants only their rows even where a Go scope check is missing.
//
// How a transaction is scoped. A context with tenants other than "*" runs its work as the role
// migrations.TenantRole with the setting idemops.tenants = those tenants, both local to the
// transaction (set_config(…, true)):
//   - an explicit transaction sends "BEGIN; SELECT set_config(…)" as one simple query, so it
//     costs the round trip BEGIN costs anyway;
//   - a lone statement is sent in one batch with the set_config before it: the extended
//     protocol runs both in one implicit transaction that ends at the batch's Sync, again one
//     round trip.
//
// So when a transaction ends, its role and tenants end with it: a pooled connection — and a
// pgbouncer server connection in transaction mode — never carries them into the next one. A
// context without tenants is scoped too, to none: it sees no tenant's rows (sign-in, sessions
// and other tables without tenants work as before). A context of every tenant ("*": the daemon,
// administrators of every tenant) runs as the login itself, the tables' owner, which row-level
// security leaves alone: its statements go through untouched.
//
// The import of a statement COPYs on the raw pgx connection (COPY FROM is refused on a table
// with row-level security for a role subject to it); it runs as the login, after the console
// checked the operator may import into that channel account.
package tenantdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/idemops/idemops/internal/pgpool"
	"github.com/idemops/idemops/migrations"
)

// AllTenants is the tenant set of every tenant.
const AllTenants = "*"

type tenantsKey struct{}

// tenantSet is what WithTenants stores: the tenants, and the setting that scopes a statement to
// them, written once per context rather than at every statement.
type tenantSet struct {
	tenants []string
	all     bool   // "*" is among them: the statements run as the login, unscoped
	setting string // the tenants as a text[] literal, for idemops.tenants
}

// WithTenants returns ctx carrying the tenants whose rows the statements run under it may touch
// ("*": every tenant's).
func WithTenants(ctx context.Context, tenants []string) context.Context {
	tenants = slices.Clone(tenants)
	return context.WithValue(ctx, tenantsKey{}, &tenantSet{tenants: tenants,
		all: slices.Contains(tenants, AllTenants), setting: arrayLiteral(tenants)})
}

// TenantsOf returns the tenants ctx carries and whether it carries any.
func TenantsOf(ctx context.Context) ([]string, bool) {
	t, ok := ctx.Value(tenantsKey{}).(*tenantSet)
	if !ok {
		return nil, false
	}
	return t.tenants, true
}

// noTenants is the scope of a context without tenants: none.
var noTenants = &tenantSet{setting: "{}"}

// scoped reports whether work under ctx runs as the tenant role, and the setting for it.
func scoped(ctx context.Context) (bool, string) {
	t, ok := ctx.Value(tenantsKey{}).(*tenantSet)
	if !ok {
		t = noTenants
	}
	return !t.all, t.setting
}

// arrayLiteral is tenants as a PostgreSQL text[] literal, every element quoted.
func arrayLiteral(tenants []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, t := range tenants {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(t); j++ {
			if t[j] == '\\' || t[j] == '"' {
				b.WriteByte('\\')
			}
			b.WriteByte(t[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// scopeSQL sets the role and the tenants for the rest of the transaction ($1: the tenants).
// Prepared statements choose between generic and custom plans as PostgreSQL does for the
// login's (plan_cache_mode auto): a statement whose generic plan would cost more than a plan
// for its values — a LIMIT parameter is planned as a tenth of the rows, and so a sort of every
// match where an index walk stops after a page — is planned for its values, and the others
// keep their generic plans after five runs. (Forcing generic plans made a filtered key search
// with its limit as a parameter ×17; TestScopedLists_ReadAPageNotTheTable in console.)
const scopeSQL = `SELECT set_config('role', '` + migrations.TenantRole + `', true), set_config('idemops.tenants', $1, true)`

// Open opens a gorm handle on dsn whose statements run under their contexts' tenants, with the
// settings of pgpool.Open (pgpool.Config, pgpool.MaxConns connections).
func Open(dsn string) (*gorm.DB, error) { return open(dsn, nil) }

// OpenGated is Open for a database that may not answer yet (a tenant cell not reached since the
// process started): nothing is connected until needed, and every new connection asks gate
// first — while it returns an error, that error is the connection's, so nothing reaches the
// database before its owner has checked it.
func OpenGated(dsn string, gate func() error) (*gorm.DB, error) { return open(dsn, gate) }

func open(dsn string, gate func() error) (*gorm.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	sqlDB := sql.OpenDB(connector{stdlib.GetConnector(*cfg), gate})
	sqlDB.SetMaxOpenConns(pgpool.MaxConns)
	sqlDB.SetMaxIdleConns(pgpool.MaxConns)
	gc := pgpool.Config()
	gc.DisableAutomaticPing = gate != nil
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), gc)
	if err != nil {
		sqlDB.Close()
		return nil, err
	}
	return db, nil
}

// Scoped reports whether db was opened by Open.
func Scoped(db *gorm.DB) bool {
	sqlDB, err := db.DB()
	if err != nil {
		return false
	}
	_, ok := sqlDB.Driver().(connector)
	return ok
}

// connector makes the pool's connections.
type connector struct {
	base driver.Connector
	gate func() error // OpenGated's; nil: always connect
}

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.gate != nil {
		if err := c.gate(); err != nil {
			return nil, err
		}
	}
	dc, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := dc.(*stdlib.Conn)
	mode := sc.Conn().Config().DefaultQueryExecMode
	return &conn{Conn: sc, unnamed: mode == pgx.QueryExecModeExec || mode == pgx.QueryExecModeSimpleProtocol}, nil
}

func (c connector) Driver() driver.Driver { return c }

// Open is driver.Driver's: a connector is only ever used through sql.OpenDB.
func (c connector) Open(string) (driver.Conn, error) {
	return nil, errors.New("tenantdb: open through tenantdb.Open")
}

// conn is one connection: statements outside a transaction are scoped one by one, a transaction
// at its start; inside it, everything goes to pgx's connection as it is.
type conn struct {
	*stdlib.Conn
	inTx bool
	// unnamed: the connection's default mode is exec or simple_protocol, so statements go
	// unnamed (sendScoped).
	unnamed   bool
	described map[string]*prepared
	seq       int // names this connection's prepared statements
	scopeName string
}

// prepared is a statement this connection prepared under a name of its own, with what reading
// its results takes: the formats asked for and each column's conversion (made once, not per
// execution).
type prepared struct {
	name    string
	sd      *pgconn.StatementDescription
	formats []int16
	values  []func(src []byte) (driver.Value, error)
	names   []string
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
)

// Pgx is the pgx connection underneath, for work that needs it whole (reconcile's COPY of a
// statement): what runs on it directly runs as the login, unscoped.
func (c *conn) Pgx() *pgx.Conn { return c.Conn.Conn() }

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	on, tenants := scoped(ctx)
	if !on {
		tx, err := c.Conn.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		c.inTx = true
		return &plainTx{tx: tx, c: c}, nil
	}
	begin, err := beginSQL(opts)
	if err != nil {
		return nil, err
	}
	// One simple query, no parameters: the tenants go in hex-encoded, so no quoting rule or
	// server setting can make a tenant's name part of the statement.
	q := begin + "; SELECT set_config('role', '" + migrations.TenantRole + "', true), set_config('idemops.tenants', " +
		"convert_from(decode('" + hex.EncodeToString([]byte(tenants)) + "', 'hex'), 'UTF8'), true)"
	if _, err := c.Conn.Conn().Exec(ctx, q); err != nil {
		if pgconn.SafeToRetry(err) {
			return nil, driver.ErrBadConn
		}
		// The BEGIN may have run: end it, or the pool discards the connection (ResetSession).
		_, _ = c.Conn.Conn().Exec(context.WithoutCancel(ctx), "rollback")
		return nil, err
	}
	c.inTx = true
	return &scopedTx{ctx: ctx, c: c}, nil
}

// beginSQL is the BEGIN statement for opts (the isolation levels and access mode pgx knows).
func beginSQL(opts driver.TxOptions) (string, error) {
	b := "begin"
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		b += " isolation level read uncommitted"
	case sql.LevelReadCommitted:
		b += " isolation level read committed"
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		b += " isolation level repeatable read"
	case sql.LevelSerializable:
		b += " isolation level serializable"
	default:
		return "", fmt.Errorf("tenantdb: unsupported isolation %v", opts.Isolation)
	}
	if opts.ReadOnly {
		b += " read only"
	}
	return b, nil
}

type plainTx struct {
	tx driver.Tx
	c  *conn
}

func (t *plainTx) Commit() error   { t.c.inTx = false; return t.tx.Commit() }
func (t *plainTx) Rollback() error { t.c.inTx = false; return t.tx.Rollback() }

type scopedTx struct {
	ctx context.Context
	c   *conn
}

func (t *scopedTx) Commit() error {
	t.c.inTx = false
	tag, err := t.c.Conn.Conn().Exec(t.ctx, "commit")
	if err == nil && tag.String() == "ROLLBACK" { // COMMIT of a failed transaction rolls it back
		return pgx.ErrTxCommitRollback
	}
	return err
}

func (t *scopedTx) Rollback() error {
	t.c.inTx = false
	_, err := t.c.Conn.Conn().Exec(context.WithoutCancel(t.ctx), "rollback")
	return err
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	on, tenants := scoped(ctx)
	if c.inTx || !on {
		return c.Conn.ExecContext(ctx, query, args)
	}
	mrr, _, err := c.sendScoped(ctx, tenants, query, args)
	if err != nil {
		return nil, err
	}
	var tag pgconn.CommandTag
	if mrr.NextResult() {
		tag, err = mrr.ResultReader().Close()
	}
	if cerr := mrr.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		c.forget(ctx, query) // a statement gone stale (the schema changed) is prepared again
		return nil, retryable(err)
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	on, tenants := scoped(ctx)
	if c.inTx || !on {
		return c.Conn.QueryContext(ctx, query, args)
	}
	mrr, p, err := c.sendScoped(ctx, tenants, query, args)
	if err != nil {
		return nil, err
	}
	if !mrr.NextResult() {
		err := mrr.Close()
		if err == nil {
			err = errors.New("tenantdb: the statement returned no result")
		}
		c.forget(ctx, query)
		return nil, retryable(err)
	}
	r := &rows{mrr: mrr, rr: mrr.ResultReader(), forget: func() { c.forget(ctx, query) }}
	if p != nil {
		r.values, r.names = p.values, p.names
	} else {
		fields := r.rr.FieldDescriptions()
		r.values, r.names = valueFuncs(c.Conn.Conn().TypeMap(), fields), columnNames(fields)
	}
	return r, nil
}

// sendScoped sends the set_config and the statement as one batch, one implicit transaction, and
// reads the set_config's result; the caller reads the statement's result and closes the reader.
// The statement goes as pgx's database/sql driver would send it on this connection, so it reads
// and writes the same values. With the connection's default mode exec or simple_protocol (the
// setting behind pgbouncer in transaction mode, where a named statement cannot outlive the
// transaction) both go unnamed and untyped, as text, as the driver sends them (p is nil).
// Otherwise both are prepared once per connection under names of this package's own (the driver
// caches its statements the same way) and executed by name, typed by their descriptions, with
// results in the driver's formats: a scoped statement is parsed and planned no more often than
// an unscoped one.
func (c *conn) sendScoped(ctx context.Context, tenants, query string, args []driver.NamedValue) (*pgconn.MultiResultReader, *prepared, error) {
	values := make([]any, len(args))
	for i, a := range args {
		values[i] = a.Value
	}
	px := c.Conn.Conn()
	var p *prepared
	if !c.unnamed {
		if c.scopeName == "" {
			if _, err := px.PgConn().Prepare(ctx, "idemops_tenantdb_scope", scopeSQL, nil); err != nil {
				return nil, nil, retryable(err)
			}
			c.scopeName = "idemops_tenantdb_scope"
		}
		var err error
		if p, err = c.prepare(ctx, query); err != nil {
			return nil, nil, retryable(err)
		}
	}
	var sd *pgconn.StatementDescription
	if p != nil {
		sd = p.sd
	}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(px.TypeMap(), sd, values); err != nil {
		return nil, nil, err
	}
	batch := &pgconn.Batch{}
	if p == nil {
		batch.ExecParams(scopeSQL, [][]byte{[]byte(tenants)}, nil, nil, nil)
		batch.ExecParams(query, eqb.ParamValues, nil, eqb.ParamFormats, nil)
	} else {
		batch.ExecPrepared(c.scopeName, [][]byte{[]byte(tenants)}, nil, nil)
		batch.ExecPrepared(p.name, eqb.ParamValues, eqb.ParamFormats, p.formats)
	}
	mrr := px.PgConn().ExecBatch(ctx, batch)
	if !mrr.NextResult() {
		err := mrr.Close()
		if err == nil {
			err = errors.New("tenantdb: no result for the tenants' setting")
		}
		return nil, nil, retryable(err)
	}
	if _, err := mrr.ResultReader().Close(); err != nil {
		_ = mrr.Close()
		return nil, nil, retryable(err)
	}
	return mrr, p, nil
}

// prepare returns the statement prepared on this connection for query, preparing it the first
// time (one round trip). At most maxDescribed are kept: past that, this connection's are
// deallocated and prepared again as they come.
func (c *conn) prepare(ctx context.Context, query string) (*prepared, error) {
	if p, ok := c.described[query]; ok {
		return p, nil
	}
	if len(c.described) >= maxDescribed {
		for q := range c.described {
			c.forget(ctx, q)
		}
	}
	c.seq++
	name := fmt.Sprintf("idemops_tenantdb_%d", c.seq)
	sd, err := c.Conn.Conn().PgConn().Prepare(ctx, name, query, nil)
	if err != nil {
		return nil, err
	}
	if c.described == nil {
		c.described = map[string]*prepared{}
	}
	// The results come in the formats asked for, so the conversions can be made now.
	fields := slices.Clone(sd.Fields)
	p := &prepared{name: name, sd: sd, formats: make([]int16, len(fields))}
	for i := range fields {
		p.formats[i] = driverFormats[fields[i].DataTypeOID]
		fields[i].Format = p.formats[i]
	}
	p.values, p.names = valueFuncs(c.Conn.Conn().TypeMap(), fields), columnNames(fields)
	c.described[query] = p
	return p, nil
}

// forget drops query's prepared statement (after an error: the schema may have changed under
// it), on the server too when the connection can still say so.
func (c *conn) forget(ctx context.Context, query string) {
	p, ok := c.described[query]
	if !ok {
		return
	}
	delete(c.described, query)
	pc := c.Conn.Conn().PgConn()
	if !pc.IsBusy() && !pc.IsClosed() {
		_ = pc.Deallocate(context.WithoutCancel(ctx), p.name)
	}
}

// maxDescribed bounds the descriptions a connection keeps.
const maxDescribed = 512

// driverFormats are the result formats pgx's database/sql driver asks for: binary for these
// types, text for the rest.
var driverFormats = map[uint32]int16{
	pgtype.BoolOID: 1, pgtype.ByteaOID: 1, pgtype.CIDOID: 1, pgtype.DateOID: 1, pgtype.Float4OID: 1,
	pgtype.Float8OID: 1, pgtype.Int2OID: 1, pgtype.Int4OID: 1, pgtype.Int8OID: 1, pgtype.OIDOID: 1,
	pgtype.TimestampOID: 1, pgtype.TimestamptzOID: 1, pgtype.XIDOID: 1,
}

// retryable turns a failure before anything was sent into driver.ErrBadConn, as pgx's stdlib
// does, so database/sql retries on another connection.
func retryable(err error) error {
	if pgconn.SafeToRetry(err) {
		return driver.ErrBadConn
	}
	return err
}

// PrepareContext prepares nothing on the server: the statement runs through ExecContext and
// QueryContext, which scope it (database/sql prepares only when asked to; gorm does not).
func (c *conn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	return &stmt{c: c, query: query}, nil
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

type stmt struct {
	c     *conn
	query string
}

func (s *stmt) Close() error  { return nil }
func (s *stmt) NumInput() int { return -1 }
func (s *stmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.New("tenantdb: use ExecContext")
}
func (s *stmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("tenantdb: use QueryContext")
}
func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.query, args)
}
func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.query, args)
}

// ResetSession discards a connection left inside a transaction (stdlib's check) and clears the
// wrapper's state with it.
func (c *conn) ResetSession(ctx context.Context) error {
	c.inTx = false
	return c.Conn.ResetSession(ctx)
}

// rows are a scoped query's rows, read from its batch; closing them ends the batch (its Sync
// ends the implicit transaction, and the role and tenants with it).
type rows struct {
	forget func() // drops the statement's description after an error
	mrr    *pgconn.MultiResultReader
	rr     *pgconn.ResultReader
	values []func(src []byte) (driver.Value, error)
	names  []string
	closed bool
}

// columnNames are the names of fields.
func columnNames(fields []pgconn.FieldDescription) []string {
	names := make([]string, len(fields))
	for i, fd := range fields {
		names[i] = fd.Name
	}
	return names
}

func (r *rows) Columns() []string { return r.names }

func (r *rows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	_, err := r.rr.Close()
	if cerr := r.mrr.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.forget()
	}
	return err
}

func (r *rows) Next(dest []driver.Value) error {
	if !r.rr.NextRow() {
		if err := r.Close(); err != nil {
			return err
		}
		return io.EOF
	}
	for i, raw := range r.rr.Values() {
		if raw == nil {
			dest[i] = nil
			continue
		}
		v, err := r.values[i](raw)
		if err != nil {
			return fmt.Errorf("convert field %d failed: %w", i, err)
		}
		dest[i] = v
	}
	return nil
}

// valueFuncs convert each column's raw values to the driver.Value pgx's stdlib gives for its
// type (the same Go types as its Rows: a scoped statement reads like an unscoped one). Like
// stdlib's, each scans into a variable of its own that it reuses, so a row costs no allocation
// but its values'; a connection reads one result at a time, so they are not shared.
func valueFuncs(m *pgtype.Map, fields []pgconn.FieldDescription) []func([]byte) (driver.Value, error) {
	out := make([]func([]byte) (driver.Value, error), len(fields))
	for i, fd := range fields {
		out[i] = valueFunc(m, fd.DataTypeOID, fd.Format)
	}
	return out
}

func valueFunc(m *pgtype.Map, oid uint32, format int16) func([]byte) (driver.Value, error) {
	switch oid {
	case pgtype.BoolOID:
		return scanAs(m, oid, format, func(v bool) driver.Value { return v })
	case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
		return scanAs(m, oid, format, func(v []byte) driver.Value { return v })
	case pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
		return scanValuer[pgtype.Uint32](m, oid, format)
	case pgtype.DateOID:
		return scanValuer[pgtype.Date](m, oid, format)
	case pgtype.TimestampOID:
		return scanValuer[pgtype.Timestamp](m, oid, format)
	case pgtype.TimestamptzOID:
		return scanValuer[pgtype.Timestamptz](m, oid, format)
	case pgtype.Float4OID:
		return scanAs(m, oid, format, func(v float32) driver.Value { return float64(v) })
	case pgtype.Float8OID:
		return scanAs(m, oid, format, func(v float64) driver.Value { return v })
	case pgtype.Int2OID:
		return scanAs(m, oid, format, func(v int16) driver.Value { return int64(v) })
	case pgtype.Int4OID:
		return scanAs(m, oid, format, func(v int32) driver.Value { return int64(v) })
	case pgtype.Int8OID:
		return scanAs(m, oid, format, func(v int64) driver.Value { return v })
	}
	return scanAs(m, oid, format, func(v string) driver.Value { return v })
}

// scanAs scans into its T and converts it (a []byte is made afresh by each scan, as in stdlib).
func scanAs[T any](m *pgtype.Map, oid uint32, format int16, conv func(T) driver.Value) func([]byte) (driver.Value, error) {
	var v T
	plan := m.PlanScan(oid, format, &v)
	return func(src []byte) (driver.Value, error) {
		if err := plan.Scan(src, &v); err != nil {
			return nil, err
		}
		return conv(v), nil
	}
}

// scanValuer scans into its pgtype value and gives its driver.Value.
func scanValuer[T any, P interface {
	*T
	driver.Valuer
}](m *pgtype.Map, oid uint32, format int16) func([]byte) (driver.Value, error) {
	var v T
	plan := m.PlanScan(oid, format, P(&v))
	return func(src []byte) (driver.Value, error) {
		if err := plan.Scan(src, P(&v)); err != nil {
			return nil, err
		}
		return P(&v).Value()
	}
}
