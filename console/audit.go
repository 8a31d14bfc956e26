package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// AuditLog is the append-only record of every state-changing action and every reveal. Rows form
// one hash chain: each stores the hash of the row before it, so an edited, inserted or deleted
// row is detectable (Verify). A trigger refuses UPDATE, DELETE and TRUNCATE.
type AuditLog struct{ db *gorm.DB }

// NewAuditLog returns the audit log on db.
func NewAuditLog(db *gorm.DB) *AuditLog { return &AuditLog{db: db} }

// Entry is one audited action. Detail must not hold raw keys, requests or responses: digests only.
type Entry struct {
	Actor  string
	IP     string
	Action string
	Target string
	Tenant string
	Detail map[string]any
}

// AuditRow is a stored entry.
type AuditRow struct {
	Seq      int64
	At       time.Time
	Actor    string
	Action   string
	Target   string
	Tenant   string
	IP       string
	Detail   string
	PrevHash string
	Hash     string
}

// genesisHash is the prev_hash of the first row.
var genesisHash = strings.Repeat("0", 64)

// chainHash is SHA-256 over the row's fields, JSON-encoded as an array so no field boundary is
// ambiguous.
func chainHash(r AuditRow) string {
	b, _ := json.Marshal([]any{r.Seq, r.At.UnixMicro(), r.Actor, r.Action, r.Target, r.Tenant, r.IP, r.Detail, r.PrevHash})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// auditLockID serializes appends, so the chain never forks and seq has no gaps.
const auditLockID = 0x1de0a0d17

// Append writes e in tx (or in its own transaction when tx is nil), after the chain's last row.
func (a *AuditLog) Append(ctx context.Context, tx *gorm.DB, e Entry) error {
	if tx == nil {
		return a.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return a.Append(ctx, tx, e) })
	}
	if e.Detail == nil {
		e.Detail = map[string]any{}
	}
	detail, err := json.Marshal(e.Detail)
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	if err := tx.Exec(`SELECT pg_advisory_xact_lock(?)`, auditLockID).Error; err != nil {
		return fmt.Errorf("audit %s: lock: %w", e.Action, err)
	}
	var last []AuditRow
	if err := tx.Raw(`SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`).Scan(&last).Error; err != nil {
		return fmt.Errorf("audit %s: read chain head: %w", e.Action, err)
	}
	r := AuditRow{Seq: 1, PrevHash: genesisHash, At: time.Now().UTC().Truncate(time.Microsecond),
		Actor: e.Actor, Action: e.Action, Target: e.Target, Tenant: e.Tenant, IP: e.IP, Detail: string(detail)}
	if len(last) == 1 {
		r.Seq, r.PrevHash = last[0].Seq+1, last[0].Hash
	}
	r.Hash = chainHash(r)
	if err := tx.Exec(`INSERT INTO audit_log (seq, at, actor, action, target, tenant, ip, detail, prev_hash, hash)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.Seq, r.At, r.Actor, r.Action, r.Target, r.Tenant, r.IP, r.Detail,
		r.PrevHash, r.Hash).Error; err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	return nil
}

// VerifyResult is what Verify found: Rows checked, and the first bad row (BadSeq 0: none).
type VerifyResult struct {
	Rows   int64
	BadSeq int64
	Reason string
}

// OK reports whether the chain is intact.
func (v VerifyResult) OK() bool { return v.BadSeq == 0 }

// Verify walks the whole chain in batches and stops at the first row whose sequence number,
// previous hash or own hash is wrong.
func (a *AuditLog) Verify(ctx context.Context) (VerifyResult, error) {
	const batch = 1000
	var res VerifyResult
	prev, after := genesisHash, int64(0)
	for {
		var rows []AuditRow
		if err := a.db.WithContext(ctx).Raw(`SELECT seq, at, actor, action, target, tenant, ip, detail, prev_hash, hash
			FROM audit_log WHERE seq > ? ORDER BY seq LIMIT ?`, after, batch).Scan(&rows).Error; err != nil {
			return res, fmt.Errorf("audit verify: %w", err)
		}
		for _, r := range rows {
			switch {
			case r.Seq != after+1:
				res.BadSeq, res.Reason = r.Seq, fmt.Sprintf("row %d follows row %d: rows are missing", r.Seq, after)
			case r.PrevHash != prev:
				res.BadSeq, res.Reason = r.Seq, "its previous-row hash does not match the row before it (a row before it was changed or removed)"
			case chainHash(r) != r.Hash:
				res.BadSeq, res.Reason = r.Seq, "its content does not match its hash (the row was edited)"
			}
			if res.BadSeq != 0 {
				return res, nil
			}
			res.Rows++
			prev, after = r.Hash, r.Seq
		}
		if len(rows) < batch {
			return res, nil
		}
	}
}

// AuditFilter selects audit rows; Before is the keyset cursor (seq of the last row shown).
type AuditFilter struct {
	Actor, Action, Tenant, Target string
	// Tenants, when set, limits rows to these tenants and to rows of no tenant.
	Tenants  []string
	From, To *time.Time
	Before   int64
	Limit    int
}

// List returns rows matching f, newest first, and whether more follow.
func (a *AuditLog) List(ctx context.Context, f AuditFilter) ([]AuditRow, bool, error) {
	if f.Limit <= 0 || f.Limit > 200 {
		f.Limit = 50
	}
	q := a.db.WithContext(ctx).Table("audit_log").
		Select("seq, at, actor, action, target, tenant, ip, detail, prev_hash, hash")
	if f.Actor != "" {
		q = q.Where("actor = ?", f.Actor)
	}
	if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	if f.Tenant != "" {
		q = q.Where("tenant = ?", f.Tenant)
	}
	if len(f.Tenants) > 0 {
		q = q.Where("(tenant IN ? OR tenant = '')", f.Tenants)
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
	var rows []AuditRow
	if err := q.Order("seq DESC").Limit(f.Limit + 1).Scan(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list audit: %w", err)
	}
	more := len(rows) > f.Limit
	if more {
		rows = rows[:f.Limit]
	}
	return rows, more, nil
}
