package downstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// maxDownstreamBody bounds what an HTTPOperation reads of a downstream answer.
const maxDownstreamBody = 1 << 20

// HTTPOperation is a claim.Operation against any HTTP downstream that deduplicates on a key
// header and can be asked for a document by that key. Build it with NewHTTPOperation or from a
// file (LoadConfig + Registry.RegisterConfig).
type HTTPOperation struct {
	cfg    OperationConfig
	client *http.Client
	// ApplyFunc, when set, replaces the default Apply (a 201 JSONSnapshot of the resource id and
	// the document's status) — e.g. to write the service's own rows in the same transaction.
	ApplyFunc ApplyFunc
}

var (
	_ claim.Operation = (*HTTPOperation)(nil)
	_ claim.Redriver  = (*HTTPOperation)(nil)
)

// NewHTTPOperation validates oc (filling its defaults) and returns the operation; a nil hc
// gets a plain client (each call is bounded by oc's timeouts). A bad oc is a *ConfigError.
func NewHTTPOperation(oc OperationConfig, hc *http.Client) (*HTTPOperation, error) {
	if err := oc.normalize(); err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &HTTPOperation{cfg: oc, client: hc}, nil
}

// Config is the operation's effective configuration (defaults filled in).
func (o *HTTPOperation) Config() OperationConfig { return o.cfg }

// Name is the configured operation name.
func (o *HTTPOperation) Name() string { return o.cfg.Name }

// Intent is the configured intent spec.
func (o *HTTPOperation) Intent() claim.IntentSpec {
	in := o.cfg.Intent
	return claim.IntentSpec{Ignore: in.Ignore, Only: in.Only,
		AmountField: in.AmountField, CurrencyField: in.CurrencyField}
}

// Redrive says whether the daemon may execute again after downstream twice said not found.
func (o *HTTPOperation) Redrive() bool { return o.cfg.Redrive }

// Execute sends the lease's canonical intent with the downstream key in the key header.
func (o *HTTPOperation) Execute(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	body := []byte(l.Intent)
	if o.cfg.Execute.KeyField != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(l.Intent, &obj); err != nil || obj == nil {
			return nil, claim.FinalFailure("invalid_intent", "the request intent is not a JSON object", nil)
		}
		obj[o.cfg.Execute.KeyField], _ = json.Marshal(l.DownstreamKey)
		body, _ = json.Marshal(obj)
	}
	status, raw, err := o.call(ctx, o.cfg.Execute.Method, o.cfg.Execute.URL, l.DownstreamKey, body, o.cfg.Timeouts.Execute)
	if err != nil {
		return nil, fmt.Errorf("%s execute: %w", o.cfg.Name, err) // ambiguous: it may have arrived
	}
	st := o.cfg.Statuses
	switch {
	case slices.Contains(st.Found, status):
		return o.document(raw)
	case slices.Contains(st.FailedFinal, status):
		return nil, claim.FinalFailure(fmt.Sprintf("downstream_%d", status), answered(status),
			JSONSnapshot(o.cfg.Response.FailureStatus, "", "failed"))
	}
	return nil, claim.RetryableFailure(fmt.Sprintf("downstream_%d", status), answered(status))
}

// Lookup GETs the document under the downstream key: found → it, not found → (nil, nil),
// anything else → an error.
func (o *HTTPOperation) Lookup(ctx context.Context, l *claim.Lease) (*claim.Document, error) {
	status, raw, err := o.call(ctx, http.MethodGet, o.cfg.Lookup.URL, l.DownstreamKey, nil, o.cfg.Timeouts.Lookup)
	if err != nil {
		return nil, fmt.Errorf("%s lookup: %w", o.cfg.Name, err)
	}
	switch st := o.cfg.Statuses; {
	case slices.Contains(st.Found, status):
		return o.document(raw)
	case slices.Contains(st.NotFound, status):
		return nil, nil
	}
	return nil, fmt.Errorf("%s lookup: %s", o.cfg.Name, answered(status))
}

// Apply runs ApplyFunc, or answers a 201 JSONSnapshot of the resource id and status.
func (o *HTTPOperation) Apply(ctx context.Context, tx *gorm.DB, l *claim.Lease, doc *claim.Document) (*claim.Snapshot, error) {
	if o.ApplyFunc != nil {
		return o.ApplyFunc(ctx, tx, l, doc)
	}
	status := "completed"
	if o.cfg.Response.Status != "" {
		if v, ok := jsonPath(doc.Body, o.cfg.Response.Status); ok {
			status = v
		}
	}
	return JSONSnapshot(defaultApplyStatus, doc.ResourceID, status), nil
}

// document reads a found answer: the resource id, and a final Failure when the document's
// status is one of the failed values.
func (o *HTTPOperation) document(raw []byte) (*claim.Document, error) {
	r := o.cfg.Response
	id, ok := jsonPath(raw, r.ResourceID)
	if !ok || id == "" {
		return nil, fmt.Errorf("%s: downstream answer has no resource id at %q", o.cfg.Name, r.ResourceID)
	}
	doc := &claim.Document{ResourceID: id, Body: json.RawMessage(raw)}
	if r.Status != "" {
		if st, ok := jsonPath(raw, r.Status); ok && slices.Contains(r.FailedValues, st) {
			doc.Failure = claim.FinalFailure("downstream_"+st, fmt.Sprintf("downstream reports %s %s", id, st),
				JSONSnapshot(r.FailureStatus, id, st))
		}
	}
	return doc, nil
}

// call sends one request, bounded by timeout, and returns the status and (bounded) body.
func (o *HTTPOperation) call(ctx context.Context, method, tmpl, dkey string, body []byte, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.ReplaceAll(tmpl, placeholder, url.PathEscape(dkey)), rd)
	if err != nil {
		return 0, nil, err
	}
	// No transparent resend by net/http: whether to retry is the claim logic's decision.
	req.GetBody = nil
	req.Header.Set(o.cfg.KeyHeader, dkey)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxDownstreamBody))
	if err != nil {
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp.StatusCode, raw, nil
}

// jsonPath returns the string (or number, as written) at a dotted path of a JSON document.
func jsonPath(raw []byte, path string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = m[part]; !ok {
			return "", false
		}
	}
	switch t := v.(type) {
	case string:
		return t, true
	case json.Number:
		return t.String(), true
	}
	return "", false
}

// answered describes a downstream answer by its status only: bodies may hold personal data
// and error details end up in logs and the console.
func answered(status int) string { return fmt.Sprintf("downstream answered %d", status) }
