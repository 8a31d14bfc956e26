package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/money"
)

// A manual replay is the most dangerous button in the system, so it is a request with guards,
// never a side path: the operator previews it (the Operation's Lookup, read-only), confirms it
// with a reason and a token bound to the key's version, and — above ApprovalAbove — a second
// operator approves it. Execution is claim.Store.TakeoverAt + Drive: downstream is looked up
// first, exactly as for a client retry or the daemon. The rules of which keys may be replayed
// are the claim's (Key.ReplayRefusal); this file holds the console's own bookkeeping.

// Prediction is what a replay of a key will do, as its preview sees it.
type Prediction string

const (
	// PredictRefused: the key may not be replayed (the preview says why).
	PredictRefused Prediction = "refused"
	// PredictRecorded: downstream has the document; it is recorded and nothing is sent.
	PredictRecorded Prediction = "recorded"
	// PredictRecordedFailed: downstream has the document and it failed; the key fails with it.
	PredictRecordedFailed Prediction = "recorded_failed"
	// PredictSend: downstream said not found a quarantine ago and says so again: it executes.
	PredictSend Prediction = "send"
	// PredictNotFoundOnce: the first not-found parks the key; it executes only after a second
	// not-found a quarantine later.
	PredictNotFoundOnce Prediction = "not_found_once"
	// PredictLookupError: downstream cannot answer; the replay would park the key with a backoff.
	PredictLookupError Prediction = "lookup_error"
)

// ReplayPreview is what the preview page and the API show before a confirmation.
type ReplayPreview struct {
	KeyID   int64       `json:"key_id"`
	Version int64       `json:"version"`
	State   claim.State `json:"state"`
	Allowed bool        `json:"allowed"`
	Outcome Prediction  `json:"outcome"`
	Text    string      `json:"text"`
	// Action says what executing would send ("a charge of 12.34 CNY to alice").
	Action        string `json:"action"`
	Amount        string `json:"amount,omitempty"`
	NeedsApproval bool   `json:"needs_approval"`
	// Token confirms this preview: bound to the key, its version and the operator.
	Token string `json:"token,omitempty"`
}

// RefusedError is a guard's refusal with the reason an operator can act on. Kind is ErrRefused
// (409) or ErrForbidden (403, e.g. approving one's own request).
type RefusedError struct {
	Reason string
	Kind   error
}

func (e *RefusedError) Error() string { return e.Reason }
func (e *RefusedError) Unwrap() error { return e.Kind }

func refused(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...), Kind: ErrRefused}
}

// operation finds the Operation a key belongs to.
func (s *Server) operation(name string) (claim.Operation, error) {
	if s.cfg.Operations == nil {
		return nil, refused("this console has no downstream operations configured")
	}
	o, ok := s.cfg.Operations(name)
	if !ok {
		return nil, refused("no operation %q is registered with this console", name)
	}
	return o, nil
}

// actionOf says in words what executing k sends: "a charge of 12.34 CNY to alice".
func actionOf(k *claim.Key) string {
	noun := k.Operation
	if i := strings.LastIndexByte(noun, '.'); i >= 0 && i < len(noun)-1 {
		noun = noun[i+1:]
	}
	article := "a"
	if strings.ContainsRune("aeiou", rune(noun[0])) {
		article = "an"
	}
	text := article + " " + noun
	if k.AmountMinor != nil && k.Currency != nil {
		text += " of " + money.Display(*k.AmountMinor, *k.Currency)
	}
	var intent struct {
		Payee any `json:"payee"`
	}
	if json.Unmarshal(k.Request, &intent) == nil {
		if p, ok := intent.Payee.(string); ok && p != "" {
			text += " to " + truncate(p, 64)
		}
	}
	return text
}

// predict runs the Operation's Lookup read-only and says what a replay of k will do. It writes
// nothing.
func (s *Server) predict(ctx context.Context, op *Operator, k *claim.Key) (Prediction, string) {
	if r := k.ReplayRefusal(); r != "" {
		return PredictRefused, r
	}
	o, err := s.operation(k.Operation)
	if err != nil {
		return PredictRefused, err.Error()
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.LookupTimeout)
	defer cancel()
	doc, err := o.Lookup(lctx, k.LookupLease(op.Actor()))
	quarantine := s.claims.Config().Quarantine
	switch {
	case err != nil:
		return PredictLookupError, fmt.Sprintf("downstream could not answer (%s) — a replay now only records that and parks the key for a backoff; nothing is sent",
			truncate(err.Error(), 200))
	case doc != nil && doc.Failure != nil:
		return PredictRecordedFailed, fmt.Sprintf("the channel already has this %s and it failed (%s) — it will be recorded as failed, nothing is sent",
			nounOf(k), doc.Failure.Code)
	case doc != nil:
		return PredictRecorded, fmt.Sprintf("the channel already has this %s (%s) — it will be recorded, nothing is sent",
			nounOf(k), doc.ResourceID)
	case k.NotFoundAt != nil && time.Since(*k.NotFoundAt) >= quarantine:
		return PredictSend, fmt.Sprintf("not found — %s will be sent now (downstream also said not found at %s, a quarantine ago)",
			actionOf(k), k.NotFoundAt.UTC().Format("15:04:05 UTC"))
	default:
		return PredictNotFoundOnce, fmt.Sprintf("not found — %s will be sent after a second check a quarantine (%s) later: this replay records the first not-found and parks the key until then",
			actionOf(k), quarantine)
	}
}

func nounOf(k *claim.Key) string {
	if i := strings.LastIndexByte(k.Operation, '.'); i >= 0 && i < len(k.Operation)-1 {
		return k.Operation[i+1:]
	}
	return "document"
}

// needsApproval is the four-eyes rule: a key whose amount is above ApprovalAbove minor units.
func (s *Server) needsApproval(k *claim.Key) bool {
	return s.cfg.ApprovalAbove >= 0 && k.AmountMinor != nil && *k.AmountMinor > s.cfg.ApprovalAbove
}

// previewReplay is the single-key preview with its confirmation token.
func (s *Server) previewReplay(ctx context.Context, op *Operator, k *claim.Key) ReplayPreview {
	p := ReplayPreview{KeyID: k.ID, Version: k.Version, State: k.State, Action: actionOf(k)}
	if k.AmountMinor != nil && k.Currency != nil {
		p.Amount = money.Display(*k.AmountMinor, *k.Currency)
	}
	p.Outcome, p.Text = s.predict(ctx, op, k)
	if p.Outcome == PredictRefused {
		return p
	}
	p.Allowed, p.NeedsApproval = true, s.needsApproval(k)
	p.Token = s.confirmToken(actionReplay, op, k.ID, k.Version)
	return p
}

// Confirmation tokens: "version.nonce.mac", mac = HMAC over action, key, version, operator and
// nonce under a key derived from the deployment secret. A token proves which preview the
// confirmation answers; the version in it makes a confirmation of a key that changed since
// stale; its hash, stored on the replay request, makes it single-use.
const (
	actionReplay  = "replay"
	actionFinal   = "final"
	actionRelease = "release"
)

func (s *Server) tokenKey() []byte {
	m := hmac.New(sha256.New, s.cfg.DigestSecret)
	m.Write([]byte("idemops/console/confirmation/v1"))
	return m.Sum(nil)
}

func (s *Server) tokenMAC(action string, op *Operator, keyID, version int64, nonce string) string {
	m := hmac.New(sha256.New, s.tokenKey())
	fmt.Fprintf(m, "%s|%d|%d|%d|%s", action, keyID, version, op.ID, nonce)
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) confirmToken(action string, op *Operator, keyID, version int64) string {
	nonce := randomSecret(12)
	return strconv.FormatInt(version, 10) + "." + nonce + "." + s.tokenMAC(action, op, keyID, version, nonce)
}

// checkToken verifies a confirmation token for op and key and returns the version it is bound to.
func (s *Server) checkToken(action string, op *Operator, keyID int64, token string) (int64, error) {
	bad := inputErr("token", "is not a confirmation of this key by you; open the preview again")
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(token) > 256 || len(parts) != 3 {
		return 0, bad
	}
	version, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || version <= 0 {
		return 0, bad
	}
	want := s.tokenMAC(action, op, keyID, version, parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return 0, bad
	}
	return version, nil
}

func tokenHash(parts ...string) []byte {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return sum[:]
}

// checkReason reads a required reason.
func checkReason(reason string) (string, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		return "", inputErr("reason", "say why (it is kept in the audit log and the key's history)")
	case len(reason) > 1000:
		return "", inputErr("reason", "is longer than 1000 characters")
	}
	return reason, nil
}

// ReplayRequest is one confirmed replay (replay_requests).
type ReplayRequest struct {
	ID            int64      `json:"id"`
	KeyID         int64      `json:"key_id"`
	Tenant        string     `json:"tenant"`
	KeyDigest     string     `json:"digest"`
	KeyVersion    int64      `json:"key_version"`
	RequestedBy   int64      `json:"-"`
	Requester     string     `json:"requester"`
	Reason        string     `json:"reason"`
	AmountMinor   *int64     `json:"amount_minor"`
	Currency      *string    `json:"currency"`
	Preview       string     `json:"preview"`
	NeedsApproval bool       `json:"needs_approval"`
	State         string     `json:"state"`
	ApprovedBy    *int64     `json:"-"`
	Approver      *string    `json:"approver"`
	OutcomeKind   *string    `json:"outcome_kind"`
	Outcome       *string    `json:"outcome"`
	BulkRunID     *int64     `json:"bulk_run_id"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	ApprovedAt    *time.Time `json:"approved_at"`
	FinishedAt    *time.Time `json:"finished_at"`
}

const replayColumns = `id, key_id, tenant, key_digest, key_version, requested_by, requester, reason, amount_minor, currency,
	preview, needs_approval, state, approved_by, approver, outcome_kind, outcome, bulk_run_id, created_at, updated_at,
	approved_at, finished_at`

func (s *Server) replayWhere(ctx context.Context, db *gorm.DB, where string, args ...any) (*ReplayRequest, error) {
	var rows []ReplayRequest
	if err := db.WithContext(ctx).Raw(`SELECT `+replayColumns+` FROM replay_requests WHERE `+where, args...).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read replay request: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// getReplay reads a request op may see (another tenant's is ErrNotFound).
func (s *Server) getReplay(ctx context.Context, op *Operator, id int64) (*ReplayRequest, error) {
	r, err := s.replayWhere(ctx, s.db, "id = ?", id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("replay request %d: %w", id, ErrNotFound)
	}
	if err := decide(op, objReplay, strconv.FormatInt(id, 10), []string{r.Tenant}, false); err != nil {
		return nil, err
	}
	return r, nil
}

// listReplays returns pending requests (oldest waiting first) and then the most recent others,
// in op's tenants.
func (s *Server) listReplays(ctx context.Context, op *Operator, limit int) ([]ReplayRequest, error) {
	scope, args := scopeSQL(op)
	var rows []ReplayRequest
	err := s.db.WithContext(ctx).Raw(`(SELECT `+replayColumns+` FROM replay_requests WHERE state = 'pending' AND `+scope+`
		ORDER BY created_at LIMIT ?) UNION ALL (SELECT `+replayColumns+` FROM replay_requests WHERE state <> 'pending' AND `+scope+`
		ORDER BY created_at DESC, id DESC LIMIT ?)`, append(append(append(append([]any{}, args...), limit), args...), limit)...).
		Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list replay requests: %w", err)
	}
	return rows, nil
}

// replayAsk is one confirmed replay of one key.
type replayAsk struct {
	op      *Operator
	ip      string
	key     *claim.Key // read just now
	version int64      // the version the preview saw
	token   []byte     // hash of the single-use confirmation
	reason  string
	bulkRun *int64
}

// requestReplay records a confirmed replay and, unless it needs a second operator's approval,
// executes it. A confirmation already used answers its request again (dup) and executes
// nothing. A stale confirmation or a key that may not be replayed is refused with the reason,
// audited.
func (s *Server) requestReplay(ctx context.Context, a replayAsk) (req *ReplayRequest, dup bool, err error) {
	if prior, err := s.replayWhere(ctx, s.db, "token_hash = ?", a.token); err != nil || prior != nil {
		return prior, prior != nil, err
	}
	k := a.key
	refusal := ""
	switch {
	case k.Version != a.version:
		refusal = fmt.Sprintf("the key changed since the preview (version %d, now %d): nothing was done; preview it again", a.version, k.Version)
	case k.ReplayRefusal() != "":
		refusal = k.ReplayRefusal()
	}
	if refusal == "" {
		if _, err := s.operation(k.Operation); err != nil {
			refusal = err.Error()
		}
	}
	if refusal != "" {
		if err := s.audit.Append(ctx, nil, Entry{Actor: a.op.Actor(), IP: a.ip, Action: "replay.refused",
			Target: fmt.Sprintf("key:%d", k.ID), Tenant: k.Tenant,
			Detail: map[string]any{"digest": k.KeyDigest, "version": a.version, "reason": refusal, "bulk_run": a.bulkRun}}); err != nil {
			return nil, false, err
		}
		return nil, false, refused("%s", refusal)
	}
	needs := s.needsApproval(k)
	state := "approved"
	if needs {
		state = "pending"
	}
	var id int64
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`INSERT INTO replay_requests (key_id, tenant, key_digest, key_version, token_hash, requested_by, requester,
				reason, amount_minor, currency, preview, needs_approval, state, bulk_run_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token_hash) DO NOTHING RETURNING id`,
			k.ID, k.Tenant, k.KeyDigest, a.version, a.token, a.op.ID, a.op.Name, a.reason, k.AmountMinor, k.Currency,
			actionOf(k), needs, state, a.bulkRun).Scan(&ids).Error; err != nil {
			return fmt.Errorf("insert replay request: %w", err)
		}
		if len(ids) == 0 {
			return nil // a concurrent submit of the same confirmation won
		}
		id = ids[0]
		return s.audit.Append(ctx, tx, Entry{Actor: a.op.Actor(), IP: a.ip, Action: "replay.request",
			Target: fmt.Sprintf("key:%d", k.ID), Tenant: k.Tenant,
			Detail: map[string]any{"request": id, "digest": k.KeyDigest, "version": a.version, "reason": a.reason,
				"needs_approval": needs, "bulk_run": a.bulkRun}})
	})
	if err != nil {
		return nil, false, err
	}
	if id == 0 {
		prior, err := s.replayWhere(ctx, s.db, "token_hash = ?", a.token)
		return prior, prior != nil, err
	}
	if err := s.claims.RecordEvent(ctx, k.ID, "replay_requested", a.op.Actor(),
		map[string]any{"request": id, "reason": a.reason, "needs_approval": needs}); err != nil {
		return nil, false, err
	}
	if needs {
		r, err := s.replayWhere(ctx, s.db, "id = ?", id)
		return r, false, err
	}
	r, err := s.executeReplay(ctx, id, a.ip, a.bulkRun == nil)
	return r, false, err
}

// approveReplay is the second pair of eyes: another operator approves a pending request, which
// then executes. The requester cannot approve their own (checked here, and by a constraint).
func (s *Server) approveReplay(ctx context.Context, op *Operator, ip string, id int64) (*ReplayRequest, error) {
	r, err := s.getReplay(ctx, op, id)
	if err != nil {
		return nil, err
	}
	if r.RequestedBy == op.ID {
		if err := s.audit.Append(ctx, nil, Entry{Actor: op.Actor(), IP: ip, Action: "replay.approve_refused",
			Target: fmt.Sprintf("replay:%d", r.ID), Tenant: r.Tenant,
			Detail: map[string]any{"digest": r.KeyDigest, "reason": "self-approval"}}); err != nil {
			return nil, err
		}
		return nil, &RefusedError{Kind: ErrForbidden,
			Reason: "you requested this replay: a second operator must approve it"}
	}
	if r.State != "pending" {
		return nil, refused("request %d is %s, not waiting for approval", r.ID, r.State)
	}
	var ok bool
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`UPDATE replay_requests SET state = 'approved', approved_by = ?, approver = ?, approved_at = now(),
			updated_at = now() WHERE id = ? AND state = 'pending' AND requested_by <> ? RETURNING id`,
			op.ID, op.Name, r.ID, op.ID).Scan(&ids).Error; err != nil {
			return fmt.Errorf("approve replay %d: %w", r.ID, err)
		}
		if ok = len(ids) == 1; !ok {
			return nil
		}
		return s.audit.Append(ctx, tx, Entry{Actor: op.Actor(), IP: ip, Action: "replay.approve",
			Target: fmt.Sprintf("replay:%d", r.ID), Tenant: r.Tenant,
			Detail: map[string]any{"digest": r.KeyDigest, "key": r.KeyID, "requester": r.Requester}})
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, refused("request %d was decided by someone else meanwhile", r.ID)
	}
	if err := s.claims.RecordEvent(ctx, r.KeyID, "replay_approved", op.Actor(),
		map[string]any{"request": r.ID, "requester": r.Requester}); err != nil {
		return nil, err
	}
	return s.executeReplay(ctx, r.ID, ip, r.BulkRunID == nil)
}

// executeReplay runs an approved request once: approved → executing is its compare-and-set.
// The takeover is bound to the previewed version; the run is claim's Drive, which looks
// downstream up before it may execute.
//
// With hold (a single replay, not a bulk run's item) the replay owns the key until it ends: on a
// first not-found it keeps the lease and waits out the quarantine itself, then looks again and
// sends or records — no second confirmation, and the reclaimer cannot take the key over in
// between. That wait runs in the background; the caller gets the request back as soon as it has
// ended or after replayAnswerWait, whichever comes first (the page then counts down).
func (s *Server) executeReplay(ctx context.Context, id int64, ip string, hold bool) (*ReplayRequest, error) {
	r, err := s.replayWhere(ctx, s.db, `id = ? AND state = 'approved'`, id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return s.replayWhere(ctx, s.db, "id = ?", id)
	}
	var claimed []int64
	if err := s.db.WithContext(ctx).Raw(`UPDATE replay_requests SET state = 'executing', updated_at = now()
		WHERE id = ? AND state = 'approved' RETURNING id`, id).Scan(&claimed).Error; err != nil {
		return nil, fmt.Errorf("start replay %d: %w", id, err)
	}
	if len(claimed) == 0 { // someone else executes it
		return s.replayWhere(ctx, s.db, "id = ?", id)
	}
	if !hold {
		return s.runReplay(ctx, r, ip, false)
	}
	done := make(chan struct{})
	s.background(func(bg context.Context) {
		defer close(done)
		if _, err := s.runReplay(bg, r, ip, true); err != nil {
			s.cfg.Logger.Error("replay", "request", id, "digest", r.KeyDigest, "err", err)
		}
	})
	select {
	case <-done:
	case <-time.After(replayAnswerWait):
	case <-ctx.Done():
	}
	return s.replayWhere(context.WithoutCancel(ctx), s.db, "id = ?", id)
}

// replayAnswerWait is how long a confirm waits for its replay before answering with the
// request's page, which then follows the replay live.
const replayAnswerWait = 5 * time.Second

// runReplay drives an executing request's key to its end and records the outcome.
func (s *Server) runReplay(ctx context.Context, r *ReplayRequest, ip string, hold bool) (*ReplayRequest, error) {
	id := r.ID
	// The key's record must outlive a closed browser tab; bounded by the lookup and query
	// timeouts, and the quarantine when the replay holds the key through it.
	limit := 2*s.cfg.LookupTimeout + 2*s.cfg.QueryTimeout
	if hold {
		limit += s.claims.Config().Quarantine
	}
	// A held replay's wait ends when the console stops (its lease then lapses and the key is the
	// reclaimer's again); the outcome is recorded either way.
	driveCtx := ctx
	if !hold {
		driveCtx = context.WithoutCancel(ctx)
	}
	driveCtx, cancelDrive := context.WithTimeout(driveCtx, limit)
	defer cancelDrive()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	actor := "operator:" + r.Requester
	state, kind, text := "executed", "", ""
	var o claim.Operation
	var lease *claim.Lease
	k, err := s.claims.Get(ctx, r.KeyID)
	if err == nil {
		o, err = s.operation(k.Operation)
	}
	if err == nil {
		lease, err = s.claims.TakeoverAt(ctx, r.KeyID, r.KeyVersion, actor)
	}
	switch {
	case errors.Is(err, claim.ErrKeyChanged):
		state, kind, text = "refused", "refused", "the key changed since the preview: nothing was done; preview it again"
	case errors.Is(err, claim.ErrNotReplayable):
		state, kind, text = "refused", "refused", "the key may no longer be replayed"
		if now, gerr := s.claims.Get(ctx, r.KeyID); gerr == nil && now.ReplayRefusal() != "" {
			text = now.ReplayRefusal()
		}
	case errors.Is(err, claim.ErrNotFound), errors.Is(err, ErrRefused):
		state, kind, text = "refused", "refused", publicMessage(err)
	case err != nil:
		state, kind, text = "failed", "error", "the takeover failed; the error was logged"
		s.cfg.Logger.Error("replay takeover failed", "request", id, "digest", r.KeyDigest, "err", err)
	default:
		out, derr := s.claims.Drive(driveCtx, o, lease, claim.DriveOptions{Execute: true, HoldThroughQuarantine: hold})
		kind, text = s.describeOutcome(ctx, r.KeyID, out, derr, hold)
		if derr != nil {
			state = "failed"
			s.cfg.Logger.Error("replay failed", "request", id, "digest", r.KeyDigest, "err", derr)
		}
	}
	s.metrics.replays.WithLabelValues(kind).Inc()
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`UPDATE replay_requests SET state = ?, outcome_kind = ?, outcome = ?, finished_at = now(), updated_at = now()
			WHERE id = ?`, state, kind, text, id).Error; err != nil {
			return fmt.Errorf("finish replay %d: %w", id, err)
		}
		return s.audit.Append(ctx, tx, Entry{Actor: actor, IP: ip, Action: "replay.execute",
			Target: fmt.Sprintf("key:%d", r.KeyID), Tenant: r.Tenant,
			Detail: map[string]any{"request": id, "digest": r.KeyDigest, "state": state, "outcome": kind, "approver": r.Approver}})
	})
	if err != nil {
		return nil, err
	}
	return s.replayWhere(ctx, s.db, "id = ?", id)
}

// describeOutcome says what Drive did, in the words of the preview.
func (s *Server) describeOutcome(ctx context.Context, keyID int64, out *claim.Outcome, err error, held bool) (kind, text string) {
	if err != nil {
		if errors.Is(err, claim.ErrLeaseLost) {
			return "error", "another party took the key over while the replay ran; it stopped without writing"
		}
		return "error", "the replay stopped with an error; it was logged"
	}
	switch out.Kind {
	case claim.Recovered:
		if out.State == claim.StateCompleted {
			return "recorded", fmt.Sprintf("recorded: the channel already had it (%s); nothing was sent", out.ResourceID)
		}
	case claim.Completed:
		return "sent", fmt.Sprintf("sent: downstream created %s and the key is completed", out.ResourceID)
	case claim.Failed:
		if out.Failure != nil {
			return "failed", fmt.Sprintf("failed (%s: %s); the key is now %s", out.Failure.Code, truncate(out.Failure.Detail, 200), out.State)
		}
		return "failed", "failed; the key is now " + string(out.State)
	case claim.InProgress:
		k, gerr := s.claims.Get(ctx, keyID)
		if gerr == nil && k.NotFoundAt != nil && !held { // a held replay waited the quarantine out already
			return "not_found_once", fmt.Sprintf("not found once — will re-check after the quarantine (at %s); the key is parked until then. Replay it again after that time to send it.",
				k.LeaseExpiresAt.UTC().Format("15:04:05 UTC"))
		}
		return "lookup_error", fmt.Sprintf("downstream could not answer — the key is parked and retried after %s", out.RetryAfter.Round(time.Second))
	}
	return string(out.Kind), fmt.Sprintf("%s; the key is now %s", out.Kind, out.State)
}

// markFinal moves a stuck key to failed_final on an administrator's word, with a reason.
func (s *Server) markFinal(ctx context.Context, op *Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	return s.adminKeyAction(ctx, op, ip, keyID, token, reason, actionFinal, "key.mark_final",
		func(tx *gorm.DB, version int64, reason string) error {
			return s.claims.MarkFinal(ctx, tx, keyID, version, op.Actor(), reason)
		}, nil)
}

// releaseForRetry lets the next client retry of a stuck or held key execute, on an
// administrator's word (with a reason) that the failed attempt changed nothing outside.
func (s *Server) releaseForRetry(ctx context.Context, op *Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	return s.adminKeyAction(ctx, op, ip, keyID, token, reason, actionRelease, "key.release_for_retry",
		func(tx *gorm.DB, version int64, reason string) error {
			return s.claims.ReleaseForRetry(ctx, tx, keyID, version, op.Actor(), reason)
		}, func(k *claim.Key) map[string]any { return map[string]any{"held": k.Held} })
}

// adminKeyAction is an administrator's transition of one key: the page's single-use token (bound
// to the version it showed) and a reason, then the claim's compare-and-set (apply) with the audit
// row in its transaction. extra adds detail to the audit row.
func (s *Server) adminKeyAction(ctx context.Context, op *Operator, ip string, keyID int64, token, reason, tokenAction, auditAction string,
	apply func(tx *gorm.DB, version int64, reason string) error, extra func(*claim.Key) map[string]any) (*claim.Key, error) {
	k, err := s.getKey(ctx, op, keyID)
	if err != nil {
		return nil, err
	}
	version, err := s.checkToken(tokenAction, op, keyID, token)
	if err != nil {
		return nil, err
	}
	if reason, err = checkReason(reason); err != nil {
		return nil, err
	}
	detail := map[string]any{"digest": k.KeyDigest, "version": version, "reason": reason}
	if extra != nil {
		maps.Copy(detail, extra(k))
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := apply(tx, version, reason); err != nil {
			return err
		}
		return s.audit.Append(ctx, tx, Entry{Actor: op.Actor(), IP: ip, Action: auditAction,
			Target: fmt.Sprintf("key:%d", keyID), Tenant: k.Tenant, Detail: detail})
	})
	switch {
	case errors.Is(err, claim.ErrKeyChanged):
		return nil, refused("the key changed since the page was loaded (version %d, now %d): nothing was done; look again", version, k.Version)
	case errors.Is(err, claim.ErrNotReplayable):
		return nil, refused("%s", k.ReplayRefusal())
	case err != nil:
		return nil, err
	}
	return s.claims.Get(ctx, keyID)
}
