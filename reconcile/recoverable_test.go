package reconcile_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/idemops/idemops/reconcile"
)

// TestFinding_Recoverable: a finding may be recovered only when it is open, CHANNEL_ONLY or
// STATUS_MISMATCH, the channel succeeded, and it names a local key — the one rule Recover and the
// console's Recover button both ask.
func TestFinding_Recoverable(t *testing.T) {
	key := int64(7)
	for _, tc := range []struct {
		name   string
		f      reconcile.Finding
		refuse error
	}{
		{"channel only, success", reconcile.Finding{Kind: reconcile.ChannelOnly, KeyID: &key, Detail: json.RawMessage(`{"channel_status":"success"}`)}, nil},
		{"status mismatch, success", reconcile.Finding{Kind: reconcile.StatusMismatch, KeyID: &key, Detail: json.RawMessage(`{"channel_status":"success"}`)}, nil},
		{"channel failed", reconcile.Finding{Kind: reconcile.ChannelOnly, KeyID: &key, Detail: json.RawMessage(`{"channel_status":"failed"}`)}, reconcile.ErrCannotRecover},
		{"no channel status", reconcile.Finding{Kind: reconcile.StatusMismatch, KeyID: &key, Detail: json.RawMessage(`{}`)}, reconcile.ErrCannotRecover},
		{"amount mismatch", reconcile.Finding{Kind: reconcile.AmountMismatch, KeyID: &key, Detail: json.RawMessage(`{"channel_status":"success"}`)}, reconcile.ErrCannotRecover},
		{"no local key", reconcile.Finding{Kind: reconcile.ChannelOnly, Detail: json.RawMessage(`{"channel_status":"success"}`)}, reconcile.ErrCannotRecover},
		{"closed", reconcile.Finding{Kind: reconcile.ChannelOnly, KeyID: &key, State: reconcile.FindingResolved, Detail: json.RawMessage(`{"channel_status":"success"}`)}, reconcile.ErrClosed},
	} {
		if tc.f.State == "" {
			tc.f.State = reconcile.FindingOpen
		}
		err := tc.f.Recoverable()
		if tc.refuse == nil && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if tc.refuse != nil && !errors.Is(err, tc.refuse) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.refuse)
		}
	}
}
