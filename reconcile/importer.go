package reconcile

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"io"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemops/idemops/daemon"
)

// Progress phases an import and a run report (done counts rows unless said otherwise).
const (
	PhaseRead  = "read"  // bytes of the statement read, of its size when known
	PhaseParse = "parse" // lines parsed
	PhaseLoad  = "load"  // lines copied into statement_lines (uncommitted until the import ends)
	PhaseMatch = "match" // lines matched to local keys (set at the end of matching)
)

// ImportRequest describes one statement file to import.
type ImportRequest struct {
	Channel string
	Format  string
	// Parser reads the file; nil: ParserFor(Format) limited to the Reconciler's MaxBytes.
	Parser Parser
	// BillDate (YYYY-MM-DD) is the day the statement covers; empty: the day most lines fall on
	// in Location.
	BillDate string
	// Location is the channel's time zone for BillDate inference (default UTC).
	Location *time.Location
	// Importer is recorded on the statement: operator:NAME, daemon.
	Importer string
	// SHA256 (hex), when the caller already knows it, lets an imported file be skipped unread.
	SHA256 string
	// Size of the file in bytes, when known, for progress.
	Size int64
	// Summary is the statement's separate summary file (Alipay's 汇总), read after it for the
	// settlement it states; nil: none. Used when Parser is nil (otherwise build the parser
	// WithSummaryFile).
	Summary io.Reader
}

// ImportResult says what an import did.
type ImportResult struct {
	StatementID int64  `json:"statement_id"`
	Channel     string `json:"channel"`
	BillDate    string `json:"bill_date"`
	Version     int    `json:"version"`
	SHA256      string `json:"sha256"`
	// AlreadyImported: this exact file was imported before; nothing was written and the
	// fields above describe the earlier import.
	AlreadyImported bool     `json:"already_imported"`
	Lines           int      `json:"lines"`
	Summary         *Summary `json:"summary,omitempty"`
	// Diff is the change against the previous version of the same channel and date (nil for
	// the first version).
	Diff *VersionDiff `json:"diff,omitempty"`
}

// VersionDiff compares a statement with the previous version for its channel and date, line by
// line, keyed by channel txn id (and kind: a refund shares its charge's txn id).
type VersionDiff struct {
	PreviousStatementID int64 `json:"previous_statement_id"`
	PreviousVersion     int   `json:"previous_version"`
	Added               int64 `json:"added"`
	Removed             int64 `json:"removed"`
	Changed             int64 `json:"changed"`
	// Samples: up to diffSamples channel txn ids per change.
	AddedTxnIDs   []string `json:"added_txn_ids,omitempty"`
	RemovedTxnIDs []string `json:"removed_txn_ids,omitempty"`
	ChangedTxnIDs []string `json:"changed_txn_ids,omitempty"`
}

const diffSamples = 20

// hashJoinThreshold is the statement size from which the matcher plans hash joins whatever the
// planner's statistics of statement_lines say.
const hashJoinThreshold = 10000

// lineColumns are the statement_lines columns the import COPYs, in lineFeed.Values order.
var lineColumns = []string{"statement_id", "line_no", "channel_txn_id", "merchant_order_no", "amount_minor", "currency", "status", "occurred_at", "raw",
	"fee_subminor", "net_subminor", "net_currency"}

// copyBatch is how many lines the parser hands the COPY at a time.
const copyBatch = 1024

// Import loads one statement file atomically: lines stream from the parser with COPY straight
// into statement_lines, in the transaction that then writes their statement row, so a line that
// does not parse, control totals that do not agree, a size over the limit or any
// database error leave nothing behind. The file's SHA-256 makes importing it again a no-op
// (AlreadyImported); another file for the same channel and date becomes the next version, and
// Diff says what changed. Progress gets PhaseRead, PhaseParse and PhaseLoad.
//
// Errors: ErrInvalid (request fields), *LineError (ErrMalformed, ErrTooLarge), ErrTooLarge,
// *ControlTotalError (ErrControlTotal; the Summary is returned with it), database errors.
func (r *Reconciler) Import(ctx context.Context, req ImportRequest, src io.Reader, p daemon.Progress) (*ImportResult, error) {
	if p == nil {
		p = daemon.NopProgress{}
	}
	if err := r.checkImportRequest(&req); err != nil {
		return nil, err
	}
	sqlDB, err := r.db.DB()
	if err != nil {
		return nil, err
	}
	if req.SHA256 != "" {
		row := sqlDB.QueryRowContext(ctx, statementBySHASQL, req.Channel, req.SHA256)
		if prev, err := alreadyImported(row, req.SHA256); err != nil || prev != nil {
			return prev, err
		}
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("import: connect: %w", err)
	}
	defer conn.Close()
	var res *ImportResult
	err = conn.Raw(func(dc any) error {
		// pgx's database/sql connection, or one wrapping it (the console's, internal/tenantdb):
		// the import COPYs on the pgx connection itself, as the login.
		var pc *pgx.Conn
		switch c := dc.(type) {
		case interface{ Conn() *pgx.Conn }:
			pc = c.Conn()
		case interface{ Pgx() *pgx.Conn }:
			pc = c.Pgx()
		default:
			return fmt.Errorf("import: the database handle is not pgx (%T)", dc)
		}
		res, err = r.importOn(ctx, pc, req, src, p)
		return err
	})
	if res != nil && res.Summary != nil && errors.Is(err, ErrControlTotal) {
		return res, err
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (r *Reconciler) checkImportRequest(req *ImportRequest) error {
	if !namePattern.MatchString(req.Channel) {
		return invalidf("channel", "%q: 1-64 letters, digits, '.', '_' or '-'", req.Channel)
	}
	if req.BillDate != "" {
		if _, err := time.Parse(time.DateOnly, req.BillDate); err != nil {
			return invalidf("bill_date", "%q is not YYYY-MM-DD", req.BillDate)
		}
	}
	if req.Location == nil {
		req.Location = time.UTC
	}
	if req.Importer == "" {
		return invalidf("importer", "must not be empty")
	}
	if req.Parser == nil {
		p, err := ParserFor(req.Format, WithMaxBytes(r.cfg.MaxBytes), WithSummaryFile(req.Summary))
		if err != nil {
			return invalidf("format", "%s", err.Error())
		}
		req.Parser = p
	}
	req.Format = req.Parser.Format()
	return nil
}

func (r *Reconciler) importOn(ctx context.Context, conn *pgx.Conn, req ImportRequest, src io.Reader, p daemon.Progress) (*ImportResult, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("import: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // no-op after commit
	// The statement_lines rows of an uncommitted import are its staging table: no other session
	// sees them before the commit, and a rollback discards them (vacuum reclaims the space). A
	// separate staging table would cost a second write of every line (the raw rows are most of a
	// statement's bytes) for no gain in atomicity.
	//
	// A crash before the commit's WAL reaches disk loses the import as if it never ran: the job
	// or operator imports the file again (the SHA-256 dedupe makes that safe), so the commit
	// need not wait for the flush.
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		return nil, fmt.Errorf("import: settings: %w", err)
	}
	// The statement's id is drawn first so the lines can carry it from the COPY on; its row is
	// written once the parse has told what to put in it (no foreign key ties the two).
	var statementID int64
	if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('statements', 'id'))`).Scan(&statementID); err != nil {
		return nil, fmt.Errorf("import: statement id: %w", err)
	}
	hasher := sha256.New()
	in := &countingReader{r: io.TeeReader(src, hasher), p: p, size: req.Size}
	feed := newLineFeed(ctx, req.Parser, in, req.Location, p)
	feed.statementID = statementID
	loaded, copyErr := tx.CopyFrom(ctx, pgx.Identifier{"statement_lines"}, lineColumns, feed)
	sum, parseErr := feed.finish()
	switch {
	case parseErr != nil:
		// The parser's verdict comes first: a COPY cut short by it says nothing more.
		if errors.Is(parseErr, ErrControlTotal) {
			// The whole file was read to reach its totals: its hash and date identify the
			// rejected file for the finding the caller records.
			_, _ = io.Copy(io.Discard, io.LimitReader(in, r.cfg.MaxBytes))
			res := &ImportResult{Channel: req.Channel, BillDate: req.BillDate, Summary: sum, SHA256: hex.EncodeToString(hasher.Sum(nil))}
			if res.BillDate == "" {
				res.BillDate = feed.commonDate()
			}
			return res, parseErr
		}
		return nil, parseErr
	case copyErr != nil:
		return nil, fmt.Errorf("import: copy: %w", copyErr)
	}
	p.Report(PhaseLoad, loaded, loaded)
	// Hash what the parser left unread (trailing bytes after the last record), bounded.
	if _, err := io.Copy(io.Discard, io.LimitReader(in, r.cfg.MaxBytes)); err != nil {
		return nil, fmt.Errorf("import: read: %w", err)
	}
	sha := hex.EncodeToString(hasher.Sum(nil))
	if req.SHA256 != "" && req.SHA256 != sha {
		return nil, invalidf("sha256", "the file's SHA-256 is %s, not the %s given", sha, req.SHA256)
	}

	billDate := req.BillDate
	if billDate == "" {
		if billDate = feed.commonDate(); billDate == "" {
			return nil, invalidf("bill_date", "the statement has no lines to infer it from; give it explicitly")
		}
	}
	// One importer at a time per channel and date: versions are numbered without gaps.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('reconcile.statement|' || $1 || '|' || $2, 0))`,
		req.Channel, billDate); err != nil {
		return nil, fmt.Errorf("import: lock: %w", err)
	}
	if prev, err := alreadyImported(tx.QueryRow(ctx, statementBySHASQL, req.Channel, sha), sha); err != nil || prev != nil {
		return prev, err
	}
	res := &ImportResult{Channel: req.Channel, BillDate: billDate, SHA256: sha, Lines: sum.Lines, Summary: sum}
	var prevID *int64
	var prevVersion *int
	if err := tx.QueryRow(ctx, `SELECT max(version), (array_agg(id ORDER BY version DESC))[1] FROM statements
		WHERE channel = $1 AND bill_date = $2`, req.Channel, billDate).Scan(&prevVersion, &prevID); err != nil {
		return nil, fmt.Errorf("import: previous version: %w", err)
	}
	res.Version = 1
	if prevVersion != nil {
		res.Version = *prevVersion + 1
	}
	sumJSON, _ := json.Marshal(sum)
	res.StatementID = statementID
	repeatedTxns, repeatedOrders := feed.repeats.maybe()
	if _, err := tx.Exec(ctx, `INSERT INTO statements (id, channel, bill_date, format, sha256, version, row_count, total_minor, bytes, summary, importer,
			repeated_txn_ids, repeated_order_nos, order_lines)
		OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		statementID, req.Channel, billDate, req.Format, sha, res.Version, sum.Lines, sum.TotalMinor, sum.Bytes, string(sumJSON), req.Importer,
		repeatedTxns, repeatedOrders, feed.repeats.orderLines()); err != nil {
		return nil, fmt.Errorf("import: statement: %w", err)
	}
	if prevID != nil {
		if res.Diff, err = diffVersions(ctx, tx, *prevID, res.StatementID); err != nil {
			return nil, err
		}
		res.Diff.PreviousVersion = *prevVersion
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("import: commit: %w", err)
	}
	return res, nil
}

// rowScanner is a pgx or database/sql row.
type rowScanner interface{ Scan(dest ...any) error }

// statementBySHASQL finds a file imported before under the same channel account (the same bytes
// under another account are that account's own statement: statements_channel_sha256).
const statementBySHASQL = `SELECT id, channel, to_char(bill_date, 'YYYY-MM-DD'), version, row_count FROM statements
WHERE channel = $1 AND sha256 = $2`

// alreadyImported reads the earlier import of a file from row, or returns nil when there is none.
func alreadyImported(row rowScanner, sha string) (*ImportResult, error) {
	res := &ImportResult{SHA256: sha, AlreadyImported: true}
	err := row.Scan(&res.StatementID, &res.Channel, &res.BillDate, &res.Version, &res.Lines)
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("import: look up sha256: %w", err)
	}
	return res, nil
}

// diffSQL compares two versions line by line: lines are keyed by channel txn id, kind (an order
// line, or the status of a refund/chargeback line, which shares its charge's txn id) and
// occurrence, so partial refunds of one charge pair up in file order.
const diffSQL = `
WITH a AS (
    SELECT channel_txn_id AS txn, CASE WHEN status IN ('success', 'failed') THEN 'order' ELSE status END AS k,
           row_number() OVER (PARTITION BY channel_txn_id, CASE WHEN status IN ('success', 'failed') THEN 'order' ELSE status END ORDER BY line_no) AS n,
           merchant_order_no, amount_minor, currency, status
    FROM statement_lines WHERE statement_id = $1
), b AS (
    SELECT channel_txn_id AS txn, CASE WHEN status IN ('success', 'failed') THEN 'order' ELSE status END AS k,
           row_number() OVER (PARTITION BY channel_txn_id, CASE WHEN status IN ('success', 'failed') THEN 'order' ELSE status END ORDER BY line_no) AS n,
           merchant_order_no, amount_minor, currency, status
    FROM statement_lines WHERE statement_id = $2
), d AS (
    SELECT CASE WHEN a.txn IS NULL THEN 'added' WHEN b.txn IS NULL THEN 'removed' ELSE 'changed' END AS change,
           COALESCE(b.txn, a.txn) AS txn
    FROM a FULL JOIN b ON a.txn = b.txn AND a.k = b.k AND a.n = b.n
    WHERE a.txn IS NULL OR b.txn IS NULL
       OR (a.merchant_order_no, a.amount_minor, a.currency, a.status) IS DISTINCT FROM (b.merchant_order_no, b.amount_minor, b.currency, b.status)
)
SELECT change, count(*), (array_agg(txn ORDER BY txn))[1:20] FROM d GROUP BY change`

func diffVersions(ctx context.Context, tx pgx.Tx, prevID, newID int64) (*VersionDiff, error) {
	rows, err := tx.Query(ctx, diffSQL, prevID, newID)
	if err != nil {
		return nil, fmt.Errorf("import: diff: %w", err)
	}
	defer rows.Close()
	d := &VersionDiff{PreviousStatementID: prevID}
	for rows.Next() {
		var change string
		var n int64
		var sample []string
		if err := rows.Scan(&change, &n, &sample); err != nil {
			return nil, fmt.Errorf("import: diff: %w", err)
		}
		switch change {
		case "added":
			d.Added, d.AddedTxnIDs = n, sample
		case "removed":
			d.Removed, d.RemovedTxnIDs = n, sample
		case "changed":
			d.Changed, d.ChangedTxnIDs = n, sample
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("import: diff: %w", err)
	}
	return d, nil
}

// lineFeed runs the parser in a goroutine and hands its lines to COPY in batches
// (pgx.CopyFromSource), so the parse streams straight into the database.
type lineFeed struct {
	ctx     context.Context
	cancel  context.CancelFunc
	batches chan []StatementLine
	done    chan struct{}
	cur     []StatementLine
	i       int
	loaded  int64
	p       daemon.Progress
	// statementID, when set, leads each row's values (lineColumns); unset, the row starts at
	// line_no (lineColumns[1:]).
	statementID int64
	// set by the parser goroutine before done closes
	sum      *Summary
	err      error
	perDate  map[int]int // lines per day, yyyymmdd in location
	location *time.Location
	repeats  repeatFinder
}

func newLineFeed(ctx context.Context, parser Parser, src io.Reader, loc *time.Location, p daemon.Progress) *lineFeed {
	ctx, cancel := context.WithCancel(ctx)
	f := &lineFeed{ctx: ctx, cancel: cancel, batches: make(chan []StatementLine, 4), done: make(chan struct{}),
		i: -1, p: p, perDate: map[int]int{}, location: loc}
	go f.parse(parser, src)
	return f
}

func (f *lineFeed) parse(parser Parser, src io.Reader) {
	// done closes first: once batches is closed, Err sees the parser's verdict.
	defer close(f.batches)
	defer close(f.done)
	batch := make([]StatementLine, 0, copyBatch)
	parsed := int64(0)
	send := func() error {
		select {
		case f.batches <- batch:
		case <-f.ctx.Done():
			return f.ctx.Err()
		}
		batch = make([]StatementLine, 0, copyBatch)
		f.p.Report(PhaseParse, parsed, 0)
		return nil
	}
	f.repeats.seed = maphash.MakeSeed()
	f.sum, f.err = parser.Parse(f.ctx, src, func(l StatementLine) error {
		y, m, d := l.OccurredAt.In(f.location).Date() // no string a line: a million-line file calls this a million times
		f.perDate[y*10000+int(m)*100+d]++
		f.repeats.add(l)
		batch = append(batch, l)
		parsed++
		if len(batch) == copyBatch {
			return send()
		}
		return nil
	})
	if f.err == nil && len(batch) > 0 {
		f.err = send()
	}
	if f.sum != nil {
		f.p.Report(PhaseParse, parsed, parsed)
	}
}

// Next implements pgx.CopyFromSource.
func (f *lineFeed) Next() bool {
	f.i++
	for f.i >= len(f.cur) {
		b, ok := <-f.batches
		if !ok {
			return false
		}
		f.cur, f.i = b, 0
		f.loaded += int64(len(b))
		if f.loaded%(64*copyBatch) < copyBatch {
			f.p.Report(PhaseLoad, f.loaded, 0)
		}
	}
	return true
}

// Values implements pgx.CopyFromSource.
func (f *lineFeed) Values() ([]any, error) {
	l := &f.cur[f.i]
	var netCurrency any // NULL: the net is in the line's currency
	if l.NetCurrency != "" {
		netCurrency = l.NetCurrency
	}
	if f.statementID != 0 {
		return []any{f.statementID, int32(l.LineNo), l.ChannelTxnID, l.MerchantOrderNo, l.AmountMinor, l.Currency, string(l.Status), l.OccurredAt, l.Raw,
			int64(l.FeeMinor), int64(l.NetMinor), netCurrency}, nil
	}
	return []any{int32(l.LineNo), l.ChannelTxnID, l.MerchantOrderNo, l.AmountMinor, l.Currency, string(l.Status), l.OccurredAt, l.Raw,
		int64(l.FeeMinor), int64(l.NetMinor), netCurrency}, nil
}

// Err implements pgx.CopyFromSource: a parse error ends the COPY (and so the import).
func (f *lineFeed) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// finish stops the parser if the COPY ended early and returns its verdict.
func (f *lineFeed) finish() (*Summary, error) {
	f.cancel()
	for range f.batches { // unblock a parser waiting to send
	}
	<-f.done
	return f.sum, f.err
}

// repeatFinder notes, for the order lines (success, failed) of a statement, the 64-bit hashes
// of their channel txn ids and merchant order numbers: 8 bytes a line each, sorted once at the
// end, where an exact answer would hold every string. The matcher needs only "none repeats" to
// skip its duplicate passes over a million lines; a hash collision merely sends it to look.
type repeatFinder struct {
	seed         maphash.Seed
	txns, orders hashChunks
}

func (r *repeatFinder) add(l StatementLine) {
	if l.Status != StatusSuccess && l.Status != StatusFailed {
		return
	}
	if l.ChannelTxnID != "" {
		r.txns.add(maphash.String(r.seed, l.ChannelTxnID))
	}
	r.orders.add(maphash.String(r.seed, l.MerchantOrderNo))
}

// orderLines is how many order lines were added.
func (r *repeatFinder) orderLines() int { return r.orders.n }

// maybe reports whether any txn id, and any order number, may appear on more than one line.
func (r *repeatFinder) maybe() (txnIDs, orderNos bool) {
	return anyRepeat(r.txns.all()), anyRepeat(r.orders.all())
}

// hashChunks collects hashes in fixed chunks: one growing slice of a million entries cost the
// import more in reallocation and page faults than the hashing itself.
type hashChunks struct {
	chunks [][]uint64
	n      int
}

const hashChunk = 1 << 16

func (h *hashChunks) add(v uint64) {
	if len(h.chunks) == 0 || len(h.chunks[len(h.chunks)-1]) == hashChunk {
		h.chunks = append(h.chunks, make([]uint64, 0, hashChunk))
	}
	last := &h.chunks[len(h.chunks)-1]
	*last = append(*last, v)
	h.n++
}

func (h *hashChunks) all() []uint64 {
	out := make([]uint64, 0, h.n)
	for _, c := range h.chunks {
		out = append(out, c...)
	}
	return out
}

func anyRepeat(h []uint64) bool {
	slices.Sort(h)
	for i := 1; i < len(h); i++ {
		if h[i] == h[i-1] {
			return true
		}
	}
	return false
}

// commonDate is the day most lines fall on (ties: the earliest), as YYYY-MM-DD.
func (f *lineFeed) commonDate() string {
	best, bestN := 0, 0
	for d, n := range f.perDate {
		if n > bestN || (n == bestN && d < best) {
			best, bestN = d, n
		}
	}
	if bestN == 0 {
		return ""
	}
	return fmt.Sprintf("%04d-%02d-%02d", best/10000, best/100%100, best%100)
}

// countingReader reports bytes read as PhaseRead progress.
type countingReader struct {
	r    io.Reader
	n    int64
	last int64
	size int64
	p    daemon.Progress
}

func (c *countingReader) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	c.n += int64(k)
	if c.n-c.last >= 1<<20 || (err == io.EOF && c.n != c.last) {
		c.last = c.n
		c.p.Report(PhaseRead, c.n, c.size)
	}
	return k, err
}

// HashFile returns the hex SHA-256 and size of a file (to skip an import of a known file unread).
func HashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
