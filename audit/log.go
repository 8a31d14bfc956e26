// Package audit is idemops' audit log: the append-only, HMAC-chained record of every operator
// action and every reveal. Whoever changes something an operator may act on writes its row in
// the same transaction as the change (Append with the caller's tx); Verify walks the chain and
// Head names its newest row, the checkpoint kept outside the database.
package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/internal/tenantdb"
)

// Log is the append-only record of every state-changing action and every reveal. Rows form
// one chain: each stores the hash of the row before it and is sealed with HMAC-SHA-256 under a
// key derived from the deployment's digest secret (not stored in the database), so an edited,
// inserted or deleted row is detectable (Verify) even by someone who can rewrite the table. Only
// the truncation of the newest rows needs a head recorded outside the database (Head).
// A trigger refuses UPDATE, DELETE and TRUNCATE.
type Log struct {
	db  *gorm.DB
	key []byte
	// apart: appends ignore the caller's transaction (Elsewhere).
	apart bool
}

// Elsewhere is the log for changes made in another database than its own (a tenant cell's, when
// the log is the control database's): its appends ignore the caller's transaction and write in
// one of their own, before the caller's commits. A change whose transaction then fails leaves a
// row recording the attempt; a failed append fails the caller's transaction, so no change is
// ever without its row.
func (a *Log) Elsewhere() *Log {
	b := *a
	b.apart = true
	return &b
}

// New returns the audit log on db, keyed from the deployment's digest secret. Without a
// secret it can list rows but not append or verify them.
func New(db *gorm.DB, digestSecret []byte) *Log {
	a := &Log{db: db}
	if len(digestSecret) > 0 {
		a.key = chainKey(digestSecret)
	}
	return a
}

// chainKey derives the chain's HMAC key from the digest secret under its own label, so the
// key-digest HMACs and the audit seals never share a key.
func chainKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("idemops audit chain v1"))
	return m.Sum(nil)
}

// ErrNoKey is returned by Append and Verify on a log made without the digest secret.
var ErrNoKey = errors.New("the audit log has no key: the deployment's digest secret is required")

// Entry is one audited action. Detail must not hold raw keys, requests or responses: digests only.
type Entry struct {
	Actor  string
	IP     string
	Action string
	Target string
	// Tenants are the tenants of the object acted on (a key's tenant, a channel account's
	// tenants, an operator's), the actor's own for sign-ins and refusals. An administrator of
	// some tenants reads the row only when these are within theirs. None, or "*" among them,
	// makes a row only administrators of every tenant read.
	Tenants []string
	Detail  map[string]any
}

// Row is a stored entry.
type Row struct {
	Seq     int64
	At      time.Time
	Actor   string
	Action  string
	Target  string
	Tenants TenantSet
	// Tenant is the single tenant rows written before migration 00116 carried (under their
	// seal); "" on rows written since.
	Tenant   string
	IP       string
	Detail   string
	PrevHash string
	Hash     string
	// Alg is how Hash was made: algHMACTenants for every row written now, algHMAC for rows
	// written before their tenants were sealed (migration 00116), algSHA256 for rows written
	// before the chain was keyed (migration 00020).
	Alg string
}

// TenantSet is a row's tenants, read from the database as a JSON array (rowColumns).
type TenantSet []string

// Scan reads the JSON array rowColumns selects.
func (t *TenantSet) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	case nil:
		*t = nil
		return nil
	default:
		return fmt.Errorf("audit tenants: cannot scan %T", src)
	}
	return json.Unmarshal(b, (*[]string)(t))
}

// Value writes the set as the JSON array Scan reads.
func (t TenantSet) Value() (driver.Value, error) {
	b, err := json.Marshal([]string(t))
	return string(b), err
}

// rowColumns are the columns a Row is read from.
const rowColumns = `seq, at, actor, action, target, array_to_json(tenants)::text AS tenants, tenant, ip, detail, prev_hash, hash, alg`

const (
	algSHA256      = "sha256"
	algHMAC        = "hmac-sha256"
	algHMACTenants = "hmac-sha256+tenants"
)

// genesisHash is the prev_hash of the first row.
var genesisHash = strings.Repeat("0", 64)

// NormalizeTenants is the stored form of an entry's tenants: sorted, each once, and ["*"] when
// there is none or "*" is among them.
func NormalizeTenants(tenants []string) []string {
	out := make([]string, 0, len(tenants))
	for _, t := range tenants {
		if t == "*" {
			return []string{"*"}
		}
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return []string{"*"}
	}
	slices.Sort(out)
	return out
}

// chainFields JSON-encodes the row's fields as an array, so no field boundary is ambiguous.
// Rows sealed with their tenants (algHMACTenants) chain the tenant set; older rows chained the
// single tenant column.
func chainFields(r Row) []byte {
	var b []byte
	if r.Alg == algHMACTenants {
		b, _ = json.Marshal([]any{r.Seq, r.At.UnixMicro(), r.Actor, r.Action, r.Target, []string(r.Tenants), r.IP, r.Detail, r.PrevHash})
	} else {
		b, _ = json.Marshal([]any{r.Seq, r.At.UnixMicro(), r.Actor, r.Action, r.Target, r.Tenant, r.IP, r.Detail, r.PrevHash})
	}
	return b
}

// chainHash is the unkeyed SHA-256 of rows written before the chain was keyed.
func chainHash(r Row) string {
	sum := sha256.Sum256(chainFields(r))
	return hex.EncodeToString(sum[:])
}

// seal is the keyed hash of a row: HMAC-SHA-256 under the audit key, over its algorithm's name
// and its fields (chainFields), so a row's seal cannot be read as another algorithm's.
func (a *Log) seal(r Row) string {
	alg := r.Alg
	if alg != algHMACTenants {
		alg = algHMAC
	}
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(alg + "\n"))
	m.Write(chainFields(r))
	return hex.EncodeToString(m.Sum(nil))
}

// lockID serializes appends, so the chain never forks and seq has no gaps.
const lockID = 0x1de0a0d17

// Append writes e in tx (or in its own transaction when tx is nil), after the chain's last row.
func (a *Log) Append(ctx context.Context, tx *gorm.DB, e Entry) error {
	return a.AppendBatch(ctx, tx, []Entry{e})
}

// appendRows bounds the rows of one INSERT (12 parameters each, within PostgreSQL's 65535).
const appendRows = 1000

// AppendBatch writes es in tx (or in its own transaction when tx is nil), in order, after the
// chain's last row: one lock and one read of the head for all of them, then their rows, up to
// appendRows per statement — a bulk action records one row per object it changed, in the
// transaction of the change, at thousands of rows a second.
func (a *Log) AppendBatch(ctx context.Context, tx *gorm.DB, es []Entry) error {
	if len(es) == 0 {
		return nil
	}
	what := es[0].Action
	if a.key == nil {
		return fmt.Errorf("audit %s: %w", what, ErrNoKey)
	}
	if tx == nil || a.apart {
		return a.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return a.inTx().AppendBatch(ctx, tx, es) })
	}
	rows := make([]Row, len(es))
	at := time.Now().UTC().Truncate(time.Microsecond)
	for i, e := range es {
		if e.Detail == nil {
			e.Detail = map[string]any{}
		}
		detail, err := json.Marshal(e.Detail)
		if err != nil {
			return fmt.Errorf("audit %s: %w", e.Action, err)
		}
		rows[i] = Row{At: at, Actor: e.Actor, Action: e.Action, Target: e.Target, Tenants: NormalizeTenants(e.Tenants), IP: e.IP,
			Detail: string(detail), Alg: algHMACTenants}
	}
	if err := tx.Exec(`SELECT pg_advisory_xact_lock(?)`, lockID).Error; err != nil {
		return fmt.Errorf("audit %s: lock: %w", what, err)
	}
	// The head through audit_log_head: an appender under row-level security reads only its
	// tenants' rows, and the chain's newest row may be anyone's.
	var last []Row
	if err := tx.Raw(`SELECT seq, hash FROM audit_log_head() WHERE seq IS NOT NULL`).Scan(&last).Error; err != nil {
		return fmt.Errorf("audit %s: read chain head: %w", what, err)
	}
	seq, prev := int64(0), genesisHash
	if len(last) == 1 {
		seq, prev = last[0].Seq, last[0].Hash
	}
	for i := range rows {
		seq++
		rows[i].Seq, rows[i].PrevHash = seq, prev
		rows[i].Hash = a.seal(rows[i])
		prev = rows[i].Hash
	}
	if len(rows) == 1 {
		return a.insert(tx, rows[0])
	}
	for start := 0; start < len(rows); start += appendRows {
		end := min(start+appendRows, len(rows))
		var sb strings.Builder
		args := make([]any, 0, 12*(end-start))
		sb.WriteString(`INSERT INTO audit_log (seq, at, actor, action, target, tenants, tenant, ip, detail, prev_hash, hash, alg) VALUES `)
		for i, r := range rows[start:end] {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?, ?, ?, ?, ARRAY(SELECT jsonb_array_elements_text(?::jsonb)), ?, ?, ?, ?, ?, ?)")
			tenants, _ := json.Marshal([]string(r.Tenants))
			args = append(args, r.Seq, r.At, r.Actor, r.Action, r.Target, string(tenants), r.Tenant, r.IP, r.Detail, r.PrevHash, r.Hash, r.Alg)
		}
		if err := tx.Exec(sb.String(), args...).Error; err != nil {
			return fmt.Errorf("audit %s: %w", what, err)
		}
	}
	return nil
}

// inTx is a without Elsewhere's: the log in a transaction of its own database.
func (a *Log) inTx() *Log {
	if !a.apart {
		return a
	}
	b := *a
	b.apart = false
	return &b
}

// insert writes r as it is.
func (a *Log) insert(tx *gorm.DB, r Row) error {
	tenants, _ := json.Marshal([]string(r.Tenants))
	if err := tx.Exec(`INSERT INTO audit_log (seq, at, actor, action, target, tenants, tenant, ip, detail, prev_hash, hash, alg)
		VALUES (?, ?, ?, ?, ?, ARRAY(SELECT jsonb_array_elements_text(?::jsonb)), ?, ?, ?, ?, ?, ?)`,
		r.Seq, r.At, r.Actor, r.Action, r.Target, string(tenants), r.Tenant, r.IP, r.Detail, r.PrevHash, r.Hash, r.Alg).Error; err != nil {
		return fmt.Errorf("audit %s: %w", r.Action, err)
	}
	return nil
}

// Head is the chain's newest row as (sequence, hash): a checkpoint. Recorded outside the
// database (the verifier's output, the daemon's log, the console's metrics), it lets a later
// Verify detect the deletion of the newest rows, which the chain alone cannot show.
type Head struct {
	Seq  int64
	Hash string
}

// String is the form `idemops audit verify --expect-head` takes: SEQ:HASH.
func (h Head) String() string { return fmt.Sprintf("%d:%s", h.Seq, h.Hash) }

// ParseHead reads SEQ:HASH (a positive sequence, 64 hex digits).
func ParseHead(s string) (Head, error) {
	seq, hash, ok := strings.Cut(s, ":")
	if !ok {
		return Head{}, fmt.Errorf("%q is not SEQ:HASH", s)
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n < 1 {
		return Head{}, fmt.Errorf("%q: the sequence must be a positive integer", s)
	}
	hash = strings.ToLower(hash)
	if _, err := hex.DecodeString(hash); err != nil || len(hash) != 64 {
		return Head{}, fmt.Errorf("%q: the hash must be 64 hex digits", s)
	}
	return Head{Seq: n, Hash: hash}, nil
}

// Head returns the chain's newest row (zero when the log is empty), without verifying it.
func (a *Log) Head(ctx context.Context) (Head, error) {
	var rows []Row
	if err := a.db.WithContext(ctx).Raw(`SELECT seq, hash FROM audit_log_head() WHERE seq IS NOT NULL`).Scan(&rows).Error; err != nil {
		return Head{}, fmt.Errorf("audit head: %w", err)
	}
	if len(rows) == 0 {
		return Head{}, nil
	}
	return Head{Seq: rows[0].Seq, Hash: rows[0].Hash}, nil
}

// VerifyOptions are the checkpoints a Verify is given. ExpectHead is a head recorded earlier: its
// row must still be there with the same hash. MinSeq is a sequence recorded earlier: the chain
// must reach it (weaker: it detects truncation, not a rewrite of the rows up to it).
type VerifyOptions struct {
	ExpectHead *Head
	MinSeq     int64
	// From resumes a walk at a head verified before (the daemon's incremental check): that row
	// must still have that hash, and only the rows after it are walked.
	From *Head
}

// VerifyResult is what Verify found: Rows checked, the head reached, how many of them are
// unkeyed rows from before the chain was keyed (Legacy) and how many were sealed before their
// tenants were (UnsealedTenants: their tenants were filled in by migration 00116, outside the
// chain), and the first bad row (BadSeq 0: none).
type VerifyResult struct {
	Rows            int64
	Legacy          int64
	UnsealedTenants int64
	Head            Head
	BadSeq          int64
	Reason          string
	// Unverified says what this walk could not prove, in a sentence ("" when nothing).
	Unverified string
}

// OK reports whether the chain is intact.
func (v VerifyResult) OK() bool { return v.BadSeq == 0 }

// Verify walks the chain in batches and stops at the first row whose sequence number, previous
// hash or seal is wrong, or that contradicts a checkpoint in opt.
func (a *Log) Verify(ctx context.Context, opt VerifyOptions) (VerifyResult, error) {
	if a.key == nil {
		return VerifyResult{}, fmt.Errorf("audit verify: %w", ErrNoKey)
	}
	// The chain is every tenant's rows: it is walked whole (as the database's login, past row-
	// level security) whoever asks, and what Verify returns names rows by number only.
	ctx = tenantdb.WithTenants(ctx, []string{tenantdb.AllTenants})
	const batch = 1000
	var res VerifyResult
	prev, after, keyed, tenantsSealed := genesisHash, int64(0), false, false
	if opt.From != nil && opt.From.Seq > 0 {
		var rows []Row
		if err := a.db.WithContext(ctx).Raw(`SELECT seq, hash, alg FROM audit_log WHERE seq = ?`, opt.From.Seq).Scan(&rows).Error; err != nil {
			return res, fmt.Errorf("audit verify: %w", err)
		}
		if len(rows) == 0 || rows[0].Hash != opt.From.Hash {
			res.BadSeq, res.Reason = opt.From.Seq, fmt.Sprintf("row %d is not the one verified before (%s): it was removed or rewritten", opt.From.Seq, opt.From)
			return res, nil
		}
		prev, after = opt.From.Hash, opt.From.Seq
		keyed, tenantsSealed = rows[0].Alg != algSHA256, rows[0].Alg == algHMACTenants
		res.Head = *opt.From
	}
	fail := func(seq int64, reason string) (VerifyResult, error) {
		res.BadSeq, res.Reason = seq, reason
		return res, nil
	}
	for {
		var rows []Row
		if err := a.db.WithContext(ctx).Raw(`SELECT `+rowColumns+`
			FROM audit_log WHERE seq > ? ORDER BY seq LIMIT ?`, after, batch).Scan(&rows).Error; err != nil {
			return res, fmt.Errorf("audit verify: %w", err)
		}
		for _, r := range rows {
			switch {
			case r.Seq != after+1:
				return fail(r.Seq, fmt.Sprintf("row %d follows row %d: rows are missing", r.Seq, after))
			case r.PrevHash != prev:
				return fail(r.Seq, "its previous-row hash does not match the row before it (a row before it was changed or removed)")
			case r.Alg == algHMACTenants:
				if !hmac.Equal([]byte(a.seal(r)), []byte(r.Hash)) {
					return fail(r.Seq, "its seal does not match its content (the row was edited, or the chain recomputed without the key)")
				}
				keyed, tenantsSealed = true, true
			case r.Alg == algHMAC && tenantsSealed:
				return fail(r.Seq, "a row sealed without its tenants after rows sealed with them (the chain was recomputed)")
			case r.Alg == algHMAC:
				if !hmac.Equal([]byte(a.seal(r)), []byte(r.Hash)) {
					return fail(r.Seq, "its seal does not match its content (the row was edited, or the chain recomputed without the key)")
				}
				keyed = true
				res.UnsealedTenants++
			case r.Alg == algSHA256 && keyed:
				return fail(r.Seq, "an unkeyed row after keyed rows (the chain was recomputed without the key)")
			case r.Alg == algSHA256:
				if chainHash(r) != r.Hash {
					return fail(r.Seq, "its content does not match its hash (the row was edited)")
				}
				res.Legacy++
				res.UnsealedTenants++
			default:
				return fail(r.Seq, fmt.Sprintf("unknown chain algorithm %q", r.Alg))
			}
			if cp := opt.ExpectHead; cp != nil && r.Seq == cp.Seq && r.Hash != cp.Hash {
				return fail(r.Seq, fmt.Sprintf("row %d is not the checkpoint's (%s): the rows up to it were rewritten, or the newest rows deleted and others appended", cp.Seq, cp))
			}
			res.Rows++
			res.Head = Head{Seq: r.Seq, Hash: r.Hash}
			prev, after = r.Hash, r.Seq
		}
		if len(rows) < batch {
			break
		}
	}
	if cp := opt.ExpectHead; cp != nil && res.Head.Seq < cp.Seq {
		return fail(res.Head.Seq+1, fmt.Sprintf("the checkpoint's head row %d is missing: the newest rows (%d–%d) were deleted", cp.Seq, res.Head.Seq+1, cp.Seq))
	}
	if opt.MinSeq > res.Head.Seq {
		return fail(res.Head.Seq+1, fmt.Sprintf("the chain ends at row %d, before the checkpoint's row %d: the newest rows were deleted", res.Head.Seq, opt.MinSeq))
	}
	var notes []string
	switch {
	case opt.ExpectHead == nil && opt.MinSeq == 0:
		notes = append(notes, "no checkpoint given, so a deletion of the newest rows cannot be detected")
	case opt.ExpectHead == nil:
		notes = append(notes, fmt.Sprintf("rows up to %d were checked for truncation only (give --expect-head to detect a rewrite by a key holder)", opt.MinSeq))
	case res.Head.Seq > opt.ExpectHead.Seq:
		notes = append(notes, fmt.Sprintf("rows %d–%d came after the checkpoint: a deletion of the newest of them would not show until this head is recorded", opt.ExpectHead.Seq+1, res.Head.Seq))
	}
	if res.Legacy > 0 {
		if keyed {
			notes = append(notes, fmt.Sprintf("rows 1–%d predate the keyed chain (unkeyed SHA-256); they are held by the first keyed row after them", res.Legacy))
		} else {
			notes = append(notes, fmt.Sprintf("all %d rows predate the keyed chain (unkeyed SHA-256), so a recomputed chain cannot be told apart without --expect-head", res.Legacy))
		}
	}
	if res.UnsealedTenants > 0 {
		notes = append(notes, fmt.Sprintf("the tenants of %d rows written before tenants were sealed were filled in afterwards from what they name (migration 00116); the chain does not cover them", res.UnsealedTenants))
	}
	res.Unverified = strings.Join(notes, "; ")
	return res, nil
}

// Filter selects audit rows; Before is the keyset cursor (seq of the last row shown).
type Filter struct {
	// Tenant keeps the rows whose tenants include it.
	Actor, Action, Tenant, Target string
	// Scope is the reader's tenants: rows whose tenants are all among them (nil, or "*" among
	// them: every row). A "*"-only row is read by readers of every tenant alone.
	Scope    []string
	From, To *time.Time
	Before   int64
	Limit    int
}

// List returns rows matching f, newest first, and whether more follow.
func (a *Log) List(ctx context.Context, f Filter) ([]Row, bool, error) {
	if f.Limit <= 0 || f.Limit > 200 {
		f.Limit = 50
	}
	q := a.db.WithContext(ctx).Table("audit_log").Select(rowColumns)
	if f.Actor != "" {
		q = q.Where("actor = ?", f.Actor)
	}
	if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	if f.Tenant != "" {
		q = q.Where("? = ANY(tenants)", f.Tenant)
	}
	if f.Scope != nil && !slices.Contains(f.Scope, "*") {
		scope, _ := json.Marshal(f.Scope)
		q = q.Where("tenants <@ ARRAY(SELECT jsonb_array_elements_text(?::jsonb))", string(scope))
	}
	if f.Target != "" {
		q = q.Where("target = ?", f.Target)
	}
	if f.From != nil {
		q = q.Where("at >= ?", *f.From)
	}
	if f.To != nil {
		q = q.Where("at < ?", *f.To)
	}
	if f.Before > 0 {
		q = q.Where("seq < ?", f.Before)
	}
	var rows []Row
	if err := q.Order("seq DESC").Limit(f.Limit + 1).Scan(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list audit: %w", err)
	}
	more := len(rows) > f.Limit
	if more {
		rows = rows[:f.Limit]
	}
	return rows, more, nil
}
