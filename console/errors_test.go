package console

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/keys"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/retention"
)

// TestErrors_EveryPackagesErrorsAnswerByTheirKind: statusOf and publicMessage are lookups by kind,
// and answer the foreign errors the console used to list one by one with the same status and words.
func TestErrors_EveryPackagesErrorsAnswerByTheirKind(t *testing.T) {
	t.Parallel()
	const internal = "Something went wrong on our side. The error was logged."
	lineErr := &reconcile.LineError{Line: 3, Reason: `amount "12.345" has more than 2 decimals`}
	tests := []struct {
		err     error
		status  int
		message string
	}{
		{access.ErrUnauthenticated, 401, "sign-in required"},
		{&access.ThrottledError{}, 429, "too many failed sign-ins; try again later"},
		{fmt.Errorf("%w (cookie missing)", access.ErrCSRF), 403, access.ErrCSRF.Error()},
		{errs.Refused(errs.Forbidden, errs.Verbatim("you requested it; another operator approves")), 403, "you requested it; another operator approves"},
		{fmt.Errorf("replay: %w", refused("the key is quarantined until 12:00")), 409, "the key is quarantined until 12:00"},
		{fmt.Errorf("operator alice: %w", access.ErrConflict), 409, "already exists"},
		{fmt.Errorf("key 9: %w", claim.ErrNotFound), 404, "not found"},
		{fmt.Errorf("policy: %w", retention.ErrPolicyNotFound), 404, "not found"},
		{fmt.Errorf("run 4: %w", reconcile.ErrNotFound), 404, "not found"},
		{fmt.Errorf("form: %w", inputErr("tenant", "unknown")), 400, "tenant: unknown"},
		{fmt.Errorf("hold: %w", errs.Fieldf("reason", "required").Of(keys.ErrInvalidHold)), 400, "reason: required"},
		{fmt.Errorf("save: %w", errs.Fieldf("keep_key", "below the floor").Of(retention.ErrBelowFloor)), 400, "keep_key: below the floor"},
		{fmt.Errorf("%w: cron_spec: 6 fields", reconcile.ErrInvalid), 400, "invalid: cron_spec: 6 fields"},
		{fmt.Errorf("%w %q", reconcile.ErrUnknownFormat, "paypal"), 400, `unknown statement format "paypal"`},
		{fmt.Errorf("statement: over the 8 MiB limit: %w", ErrTooLarge), 413, "statement: over the 8 MiB limit: upload too large"},
		{fmt.Errorf("import: %w", lineErr), 422, lineErr.Error()},
		{fmt.Errorf("%w: zip holds 3 files", reconcile.ErrArchive), 422, "archive refused: zip holds 3 files"},
		{fmt.Errorf("%w: finding 4", reconcile.ErrClosed), 409, "finding already closed: finding 4"},
		{fmt.Errorf("%w: the key is not failed", reconcile.ErrCannotRecover), 409, "cannot recover: the key is not failed"},
		{fmt.Errorf("load: %w", context.DeadlineExceeded), 500, internal},
		{audit.ErrNoKey, 500, internal},
		// New with the one vocabulary: these were 500s.
		{fmt.Errorf("schedule: %w", daemon.ErrUnknownSchedule), 404, "not found"},
		{fmt.Errorf("replay: %w", claim.ErrLeaseLost), 409, "replay: lease lost"},
	}
	for _, tt := range tests {
		if got := statusOf(tt.err); got != tt.status {
			t.Errorf("statusOf(%v) = %d; want %d", tt.err, got, tt.status)
		}
		if got := publicMessage(tt.err); got != tt.message {
			t.Errorf("publicMessage(%v) = %q; want %q", tt.err, got, tt.message)
		}
	}
}

// TestAPIErrors_NameTheirType: an API error says its kind as "type" beside the status and message.
func TestAPIErrors_NameTheirType(t *testing.T) {
	b := setup(t)
	b.addOperator("bot", access.RoleViewer, "acme")
	tok, err := b.srv.ops.CreateToken(context.Background(), access.Change{Actor: "test"}, "bot", "ci", 0)
	if err != nil {
		t.Fatal(err)
	}
	c := b.client()
	for _, tt := range []struct {
		path, token string
		status      int
		typ, text   string
	}{
		{"/api/v1/keys", "", 401, "unauthorized", "sign-in required"},
		{"/api/v1/keys/987654", tok, 404, "not-found", "not found"},
	} {
		got := c.api(tt.path, tt.token)
		var body struct {
			Error  string `json:"error"`
			Status int    `json:"status"`
			Type   string `json:"type"`
		}
		if err := json.Unmarshal([]byte(got.Body), &body); err != nil || got.Status != tt.status ||
			body.Status != tt.status || body.Type != tt.typ || body.Error != tt.text {
			t.Errorf("%s: %d %s; want %d with type %q and %q", tt.path, got.Status, got.Body, tt.status, tt.typ, tt.text)
		}
	}
}
