package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/tenantdb"
)

// Request is one confirmed replay (replay_requests).
type Request struct {
	ID          int64   `json:"id"`
	KeyID       int64   `json:"key_id"`
	Tenant      string  `json:"tenant"`
	KeyDigest   string  `json:"digest"`
	KeyVersion  int64   `json:"key_version"`
	RequestedBy int64   `json:"-"`
	Requester   string  `json:"requester"`
	Reason      string  `json:"reason"`
	AmountMinor *int64  `json:"amount_minor"`
	Currency    *string `json:"currency"`
	Preview     string  `json:"preview"`
	// Prediction is what the preview it was confirmed from said the replay would do; the
	// replay executes only when that was a send (nil for requests made before it was kept:
	// they never execute).
	Prediction *string `json:"prediction"`
	// PreviewPhrase is Preview as a phrase, for a console that says it in the operator's
	// language when it shows the request (not when it was made); not Valid for older rows.
	PreviewPhrase errs.NullPhrase `json:"-"`
	NeedsApproval bool            `json:"needs_approval"`
	State         string          `json:"state"`
	ApprovedBy    *int64          `json:"-"`
	Approver      *string         `json:"approver"`
	OutcomeKind   *string         `json:"outcome_kind"`
	Outcome       *string         `json:"outcome"`
	// OutcomePhrase is Outcome as a phrase (see PreviewPhrase).
	OutcomePhrase errs.NullPhrase `json:"-"`
	BulkRunID     *int64          `json:"bulk_run_id"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	ApprovedAt    *time.Time      `json:"approved_at"`
	FinishedAt    *time.Time      `json:"finished_at"`
}

const requestColumns = `id, key_id, tenant, key_digest, key_version, requested_by, requester, reason, amount_minor, currency,
	preview, prediction, preview_phrase::text AS preview_phrase, needs_approval, state, approved_by, approver, outcome_kind, outcome,
	outcome_phrase::text AS outcome_phrase, bulk_run_id, created_at, updated_at, approved_at, finished_at`

func (w *Workflow) requestWhere(ctx context.Context, where string, args ...any) (*Request, error) {
	var rows []Request
	if err := w.db.WithContext(ctx).Raw(`SELECT `+requestColumns+` FROM replay_requests WHERE `+where, args...).
		Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read replay request: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// Request reads one replay request, whoever's it is (the caller decides scope by its Tenant);
// ErrNotFound when there is none.
func (w *Workflow) Request(ctx context.Context, id int64) (*Request, error) {
	r, err := w.requestWhere(ctx, "id = ?", id)
	if err == nil && r == nil {
		err = fmt.Errorf("replay request %d: %w", id, ErrNotFound)
	}
	return r, err
}

// List returns pending requests (oldest waiting first) and then up to limit of the most recent
// others, in a's tenants.
func (w *Workflow) List(ctx context.Context, a Actor, limit int) ([]Request, error) {
	scope, args := a.tenantScope()
	var rows []Request
	err := w.db.WithContext(ctx).Raw(`(SELECT `+requestColumns+` FROM replay_requests WHERE state = 'pending' AND `+scope+`
		ORDER BY created_at LIMIT ?) UNION ALL (SELECT `+requestColumns+` FROM replay_requests WHERE state <> 'pending' AND `+scope+`
		ORDER BY created_at DESC, id DESC LIMIT ?)`, append(append(append(append([]any{}, args...), limit), args...), limit)...).
		Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list replay requests: %w", err)
	}
	return rows, nil
}

// ListForKey returns the newest requests of keyID in a's tenants.
func (w *Workflow) ListForKey(ctx context.Context, a Actor, keyID int64, limit int) ([]Request, error) {
	scope, args := a.tenantScope()
	var rows []Request
	err := w.db.WithContext(ctx).Raw(`SELECT `+requestColumns+` FROM replay_requests WHERE key_id = ? AND `+scope+`
		ORDER BY created_at DESC, id DESC LIMIT ?`, append(append([]any{keyID}, args...), limit)...).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list replay requests of key %d: %w", keyID, err)
	}
	return rows, nil
}

// Confirm is the confirmation of a single replay: a's token from the preview of k (read within
// a's scope just now) and a reason. It records the request and, unless it needs a second
// operator's approval, executes it — executing downstream only when the preview showed a send.
// A confirmation used before answers its request again (dup) and executes nothing. Errors:
// *errs.FieldError (token, reason), *errs.RefusedError (stale or refused, or downstream's answer
// moved from "nothing is sent" to a send since the preview).
func (w *Workflow) Confirm(ctx context.Context, a Actor, k *claim.Key, token, reason string) (req *Request, dup bool, err error) {
	version, predicted, err := w.CheckReplayToken(a.ID, k.ID, token)
	if err != nil {
		return nil, false, err
	}
	if reason, err = CheckReason(reason); err != nil {
		return nil, false, err
	}
	return w.request(ctx, ask{actor: a, key: k, version: version, token: tokenHash(ActionReplay, token), reason: reason,
		predicted: predicted})
}

// ask is one confirmed replay of one key.
type ask struct {
	actor   Actor
	key     *claim.Key // read just now
	version int64      // the version the preview saw
	token   []byte     // hash of the single-use confirmation
	reason  string
	bulkRun *int64
	// predicted is what the preview showed ("" when unknown): only a send lets the replay execute.
	predicted Prediction
}

// request records a confirmed replay and, unless it needs a second operator's approval,
// executes it. A confirmation already used answers its request again (dup) and executes
// nothing. A stale confirmation or a key that may not be replayed is refused with the reason,
// audited.
func (w *Workflow) request(ctx context.Context, a ask) (req *Request, dup bool, err error) {
	if prior, err := w.requestWhere(ctx, "token_hash = ?", a.token); err != nil || prior != nil {
		return prior, prior != nil, err
	}
	k := a.key
	var refusal errs.Phrase
	switch {
	case k.Version != a.version:
		refusal = errs.Phrasef("the key changed since the preview (version %d, now %d): nothing was done; preview it again", a.version, k.Version)
	case k.ReplayRefusal() != "":
		refusal = k.ReplayRefusalPhrase()
	}
	if refusal.Format == "" {
		if _, err := w.operation(k.Operation); err != nil {
			refusal = errs.Verbatim(err.Error())
			if re := (*errs.RefusedError)(nil); errors.As(err, &re) {
				refusal = re.Phrasing()
			}
		}
	}
	if refusal.Format == "" {
		// Checked again at the confirmation: a preview that said "nothing is sent" confirms no
		// send, whatever downstream says now.
		if now, _ := w.predict(ctx, a.actor, k); now.sends() && !a.predicted.sends() {
			refusal = errs.Phrasef("downstream's answer changed since the preview (it showed %s, now %s): nothing was done; preview it again",
				errs.Verbatim(string(a.predicted)), errs.Verbatim(string(now)))
		}
	}
	if refusal.Format != "" {
		if err := w.audit.Append(ctx, nil, audit.Entry{Actor: a.actor.Ref(), IP: a.actor.IP, Action: "replay.refused",
			Target: fmt.Sprintf("key:%d", k.ID), Tenants: []string{k.Tenant},
			Detail: map[string]any{"digest": k.KeyDigest, "version": a.version, "reason": refusal.String(), "bulk_run": a.bulkRun}}); err != nil {
			return nil, false, err
		}
		return nil, false, errs.Refused(errs.Conflict, refusal)
	}
	needs := w.needsApproval(k)
	action := actionPhrase(k)
	state := "approved"
	if needs {
		state = "pending"
	}
	var id int64
	err = w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`INSERT INTO replay_requests (key_id, tenant, key_digest, key_version, token_hash, requested_by, requester,
				reason, amount_minor, currency, preview, preview_phrase, prediction, needs_approval, state, bulk_run_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb, NULLIF(?, ''), ?, ?, ?) ON CONFLICT (token_hash) DO NOTHING RETURNING id`,
			k.ID, k.Tenant, k.KeyDigest, a.version, a.token, a.actor.ID, a.actor.Name, a.reason, k.AmountMinor, k.Currency,
			action.String(), errs.Stored(action), string(a.predicted), needs, state, a.bulkRun).Scan(&ids).Error; err != nil {
			return fmt.Errorf("insert replay request: %w", err)
		}
		if len(ids) == 0 {
			return nil // a concurrent submit of the same confirmation won
		}
		id = ids[0]
		return w.audit.Append(ctx, tx, audit.Entry{Actor: a.actor.Ref(), IP: a.actor.IP, Action: "replay.request",
			Target: fmt.Sprintf("key:%d", k.ID), Tenants: []string{k.Tenant},
			Detail: map[string]any{"request": id, "digest": k.KeyDigest, "version": a.version, "reason": a.reason,
				"needs_approval": needs, "bulk_run": a.bulkRun}})
	})
	if err != nil {
		return nil, false, err
	}
	if id == 0 {
		prior, err := w.requestWhere(ctx, "token_hash = ?", a.token)
		return prior, prior != nil, err
	}
	if err := w.claims.RecordEvent(ctx, k.ID, "replay_requested", a.actor.Ref(),
		map[string]any{"request": id, "reason": a.reason, "needs_approval": needs}); err != nil {
		return nil, false, err
	}
	if needs {
		r, err := w.requestWhere(ctx, "id = ?", id)
		return r, false, err
	}
	r, err := w.execute(ctx, id, a.actor.IP, a.bulkRun == nil)
	return r, false, err
}

// Approve is the second pair of eyes: a (another operator) approves the pending request r
// (read within a's scope), which then executes. The requester cannot approve their own
// (refused here as forbidden, audited, and by a constraint).
func (w *Workflow) Approve(ctx context.Context, a Actor, r *Request) (*Request, error) {
	if r.RequestedBy == a.ID {
		if err := w.audit.Append(ctx, nil, audit.Entry{Actor: a.Ref(), IP: a.IP, Action: "replay.approve_refused",
			Target: fmt.Sprintf("replay:%d", r.ID), Tenants: []string{r.Tenant},
			Detail: map[string]any{"digest": r.KeyDigest, "reason": "self-approval"}}); err != nil {
			return nil, err
		}
		return nil, errs.Refused(errs.Forbidden, errs.Phrasef("you requested this replay: a second operator must approve it"))
	}
	if r.State != "pending" {
		return nil, refused("request %d is %s, not waiting for approval", r.ID, r.State)
	}
	var ok bool
	err := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`UPDATE replay_requests SET state = 'approved', approved_by = ?, approver = ?, approved_at = now(),
			updated_at = now() WHERE id = ? AND state = 'pending' AND requested_by <> ? RETURNING id`,
			a.ID, a.Name, r.ID, a.ID).Scan(&ids).Error; err != nil {
			return fmt.Errorf("approve replay %d: %w", r.ID, err)
		}
		if ok = len(ids) == 1; !ok {
			return nil
		}
		return w.audit.Append(ctx, tx, audit.Entry{Actor: a.Ref(), IP: a.IP, Action: "replay.approve",
			Target: fmt.Sprintf("replay:%d", r.ID), Tenants: []string{r.Tenant},
			Detail: map[string]any{"digest": r.KeyDigest, "key": r.KeyID, "requester": r.Requester}})
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, refused("request %d was decided by someone else meanwhile", r.ID)
	}
	if err := w.claims.RecordEvent(ctx, r.KeyID, "replay_approved", a.Ref(),
		map[string]any{"request": r.ID, "requester": r.Requester}); err != nil {
		return nil, err
	}
	return w.execute(ctx, r.ID, a.IP, r.BulkRunID == nil)
}

// execute runs an approved request once: approved → executing is its compare-and-set. The
// takeover is bound to the previewed version; the run is claim's Drive, which looks downstream
// up before it may execute.
//
// With hold (a single replay, not a bulk run's item) the replay owns the key until it ends: on a
// first not-found it keeps the lease and waits out the quarantine itself, then looks again and
// sends or records — no second confirmation, and the reclaimer cannot take the key over in
// between. That wait runs in the background; the caller gets the request back as soon as it has
// ended or after Config.AnswerWait, whichever comes first (the page then counts down).
func (w *Workflow) execute(ctx context.Context, id int64, ip string, hold bool) (*Request, error) {
	r, err := w.requestWhere(ctx, `id = ? AND state = 'approved'`, id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return w.requestWhere(ctx, "id = ?", id)
	}
	var claimed []int64
	if err := w.db.WithContext(ctx).Raw(`UPDATE replay_requests SET state = 'executing', updated_at = now()
		WHERE id = ? AND state = 'approved' RETURNING id`, id).Scan(&claimed).Error; err != nil {
		return nil, fmt.Errorf("start replay %d: %w", id, err)
	}
	if len(claimed) == 0 { // someone else executes it
		return w.requestWhere(ctx, "id = ?", id)
	}
	if !hold {
		return w.run(ctx, r, ip, false)
	}
	done := make(chan struct{})
	w.background(func(bg context.Context) {
		defer close(done)
		// Past the request, under the key's tenant alone (row-level security on a console's handle).
		bg = tenantdb.WithTenants(bg, []string{r.Tenant})
		if _, err := w.run(bg, r, ip, true); err != nil {
			w.log.Error("replay", "request", id, "digest", r.KeyDigest, "err", err)
		}
	})
	select {
	case <-done:
	case <-time.After(w.cfg.AnswerWait):
	case <-ctx.Done():
	}
	return w.requestWhere(context.WithoutCancel(ctx), "id = ?", id)
}

// run drives an executing request's key to its end and records the outcome.
func (w *Workflow) run(ctx context.Context, r *Request, ip string, hold bool) (*Request, error) {
	id := r.ID
	// The key's record must outlive a closed browser tab; bounded by the lookup and query
	// timeouts, and the quarantine when the replay holds the key through it.
	limit := 2*w.cfg.LookupTimeout + 2*w.cfg.QueryTimeout
	if hold {
		limit += w.claims.Config().Quarantine
	}
	// A held replay's wait ends when the workflow closes (its lease then lapses and the key is
	// the reclaimer's again); the outcome is recorded either way.
	driveCtx := ctx
	if !hold {
		driveCtx = context.WithoutCancel(ctx)
	}
	driveCtx, cancelDrive := context.WithTimeout(driveCtx, limit)
	defer cancelDrive()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	actor := "operator:" + r.Requester
	state, kind := "executed", ""
	var why errs.Phrase
	var o claim.Operation
	var lease *claim.Lease
	k, err := w.claims.Get(ctx, r.KeyID)
	if err == nil {
		o, err = w.operation(k.Operation)
	}
	if err == nil {
		lease, err = w.claims.TakeoverAt(ctx, r.KeyID, r.KeyVersion, actor)
	}
	var re *errs.RefusedError
	switch {
	case errors.Is(err, claim.ErrKeyChanged):
		state, kind, why = "refused", "refused", errs.Phrasef("the key changed since the preview: nothing was done; preview it again")
	case errors.Is(err, claim.ErrNotReplayable):
		state, kind, why = "refused", "refused", errs.Phrasef("the key may no longer be replayed")
		if now, gerr := w.claims.Get(ctx, r.KeyID); gerr == nil && now.ReplayRefusal() != "" {
			why = now.ReplayRefusalPhrase()
		}
	case errors.Is(err, claim.ErrNotFound):
		state, kind, why = "refused", "refused", errs.Phrasef("not found")
	case errors.As(err, &re):
		state, kind, why = "refused", "refused", re.Phrasing()
	case err != nil:
		state, kind, why = "failed", "error", errs.Phrasef("the takeover failed; the error was logged")
		w.log.Error("replay takeover failed", "request", id, "digest", r.KeyDigest, "err", err)
	default:
		// Downstream is asked first whatever the key's flags; it executes only when the preview
		// this request was confirmed from showed a send.
		sends := r.Prediction != nil && Prediction(*r.Prediction).sends()
		out, derr := w.claims.Drive(driveCtx, o, lease, claim.DriveOptions{Execute: sends, HoldThroughQuarantine: hold && sends})
		kind, why = w.describeOutcome(ctx, r.KeyID, out, derr, hold)
		if derr != nil {
			state = "failed"
			w.log.Error("replay failed", "request", id, "digest", r.KeyDigest, "err", derr)
		}
	}
	w.outcomes.WithLabelValues(kind).Inc()
	return w.finish(ctx, r, ip, state, kind, why)
}

// finish records how an executing request ended, with its audit row, once: a request another
// pass finished already keeps its outcome. The outcome is stored as English text and as the
// phrase a console says in its operator's language.
func (w *Workflow) finish(ctx context.Context, r *Request, ip, state, kind string, why errs.Phrase) (*Request, error) {
	err := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE replay_requests SET state = ?, outcome_kind = ?, outcome = ?, outcome_phrase = ?::jsonb,
			finished_at = now(), updated_at = now() WHERE id = ? AND state = 'executing'`, state, kind, why.String(), errs.Stored(why), r.ID)
		if res.Error != nil {
			return fmt.Errorf("finish replay %d: %w", r.ID, res.Error)
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return w.audit.Append(ctx, tx, audit.Entry{Actor: "operator:" + r.Requester, IP: ip, Action: "replay.execute",
			Target: fmt.Sprintf("key:%d", r.KeyID), Tenants: []string{r.Tenant},
			Detail: map[string]any{"request": r.ID, "digest": r.KeyDigest, "state": state, "outcome": kind, "approver": r.Approver}})
	})
	if err != nil {
		return nil, err
	}
	return w.requestWhere(ctx, "id = ?", r.ID)
}

// describeOutcome says what Drive did, in the words of the preview. A key state inside it is a
// phrase of its own (the state's word), which a console looks up like the states it lists.
func (w *Workflow) describeOutcome(ctx context.Context, keyID int64, out *claim.Outcome, err error, held bool) (kind string, why errs.Phrase) {
	if err != nil {
		if errors.Is(err, claim.ErrLeaseLost) {
			return "error", errs.Phrasef("another party took the key over while the replay ran; it stopped without writing")
		}
		if p := (*claim.PanicError)(nil); errors.As(err, &p) {
			if p.Method == "lookup" {
				return "error", errs.Phrasef("the operation's lookup panicked (%s): the key is parked and looked up again later; nothing was sent", p.Type)
			}
			return "error", errs.Phrasef("the operation panicked in %s (%s): the key is held for an operator, since it may have reached downstream", p.Method, p.Type)
		}
		return "error", errs.Phrasef("the replay stopped with an error; it was logged")
	}
	state := errs.Verbatim(string(out.State))
	switch out.Kind {
	case claim.Recovered:
		if out.State == claim.StateCompleted {
			return "recorded", errs.Phrasef("recorded: the channel already had it (%s); nothing was sent", out.ResourceID)
		}
	case claim.Completed:
		return "sent", errs.Phrasef("sent: downstream created %s and the key is completed", out.ResourceID)
	case claim.Failed:
		if out.Failure != nil {
			return "failed", errs.Phrasef("failed (%s: %s); the key is now %s", out.Failure.Code, truncate(out.Failure.Detail, 200), state)
		}
		return "failed", errs.Phrasef("failed; the key is now %s", state)
	case claim.InProgress:
		k, gerr := w.claims.Get(ctx, keyID)
		if gerr == nil && k.NotFoundAt != nil && !held { // a held replay waited the quarantine out already
			var at any = "—"
			if k.LeaseExpiresAt != nil {
				at = *k.LeaseExpiresAt
			}
			return "not_found_once", errs.Phrasef("not found once — will re-check after the quarantine (at %s); the key is parked until then. Replay it again after that time to send it.",
				at)
		}
		return "lookup_error", errs.Phrasef("downstream could not answer — the key is parked and retried after %s", out.RetryAfter.Round(time.Second))
	}
	return string(out.Kind), errs.Phrasef("%s; the key is now %s", errs.Verbatim(string(out.Kind)), state)
}
