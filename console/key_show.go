package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/templates"
)

func (s *Server) keyView(ctx context.Context, r *request, k *claim.Key) (templates.KeyView, error) {
	kc, err := s.cells.ofKey(k)
	if err != nil {
		return templates.KeyView{}, err
	}
	evs, err := kc.claims.History(ctx, k.ID, 1000)
	if err != nil {
		return templates.KeyView{}, err
	}
	v := templates.KeyView{Key: k, Events: evs,
		Request:   templates.Body{Name: "Request", Present: len(k.Request) > 0, Size: len(k.Request)},
		Response:  templates.Body{Name: "Response", Present: len(k.ResponseBody) > 0, Size: len(k.ResponseBody)},
		CanReveal: r.op.Role >= access.RoleOperator, CanCheck: r.op.Role >= access.RoleOperator,
		CanReplay: r.op.Role >= access.RoleOperator, Refusal: k.ReplayRefusalPhrase(), CanHold: r.op.Role >= access.RoleAdmin,
		Cell: kc.name}
	v.Panels = s.keyPanels(withKeyCell(ctx, kc), k)
	v.Summary = s.intentSummary(k)
	answers, err := kc.claims.Answers(ctx, k.ID)
	if err != nil {
		return templates.KeyView{}, err
	}
	if v.Related, err = s.keyRelated(ctx, r.op, k); err != nil {
		return templates.KeyView{}, err
	}
	v.EventLinks = eventLinks(evs, k.ID, r.op.Role >= access.RoleOperator)
	for _, a := range answers {
		v.Answers = append(v.Answers, templates.AnswerRow{Kind: string(a.Kind), Status: a.Status, Count: a.Count,
			First: a.FirstAt, Last: a.LastAt})
	}
	return v, nil
}

// intentSummary is the key's request fields its operation declares non-sensitive
// (IntentSpec.Summary), shown without reveal. The amount is formatted with its currency by the
// money package (the currency then needs no row of its own); a key whose operation is not
// registered or declares nothing has no summary.
func (s *Server) intentSummary(k *claim.Key) []templates.SummaryRow {
	if s.cfg.Operations == nil {
		return nil
	}
	o, ok := s.cfg.Operations(k.Operation)
	if !ok {
		return nil
	}
	spec := o.Intent()
	fields := spec.SummaryOf(k.Request)
	amountShown := false
	for _, f := range fields {
		if f.Path == spec.AmountField && k.AmountMinor != nil && k.Currency != nil {
			amountShown = true
		}
	}
	var out []templates.SummaryRow
	for _, f := range fields {
		switch {
		case f.Path == spec.AmountField && amountShown:
			out = append(out, templates.SummaryRow{Label: "amount", Field: f.Path, Value: money.Display(*k.AmountMinor, *k.Currency)})
		case f.Path == spec.CurrencyField && amountShown:
		default:
			out = append(out, templates.SummaryRow{Label: strings.ReplaceAll(f.Path, "_", " "), Field: f.Path, Value: f.Value})
		}
	}
	return out
}

// key is the key detail page. Its state refreshes itself while the key is not settled: an htmx
// request for ?part=state gets that part alone, read from the key's row (one query).
func (s *Server) key(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	k, err := s.keyParam(ctx, c, r)
	if err != nil {
		return err
	}
	if isHTMX(c) && c.Query("part") == "state" {
		s.render(c, http.StatusOK, templates.KeyStateLive(k))
		return nil
	}
	v, err := s.keyView(ctx, r, k)
	if err != nil {
		return err
	}
	s.render(c, http.StatusOK, templates.KeyPage(chrome(r, "keys"), v))
	return nil
}

func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

func bodyText(b []byte) string {
	if json.Valid(b) {
		return prettyJSON(b)
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return fmt.Sprintf("(%d bytes of binary data)\n%x", len(b), b)
}

// apiKeyDetail is a key as the API shows it: bodies stay redacted (their sizes only).
type apiKeyDetail struct {
	ID                 int64       `json:"id"`
	Tenant             string      `json:"tenant"`
	Operation          string      `json:"operation"`
	Key                string      `json:"key"`
	Digest             string      `json:"digest"`
	Fingerprint        string      `json:"fingerprint"`
	FingerprintVersion int         `json:"fingerprint_version"`
	State              claim.State `json:"state"`
	Attempts           int         `json:"attempts"`
	DownstreamKey      string      `json:"downstream_key"`
	LeaseOwner         *string     `json:"lease_owner"`
	LeaseExpiresAt     *time.Time  `json:"lease_expires_at"`
	LeaseExpired       bool        `json:"lease_expired"`
	ResponseStatus     *int        `json:"response_status"`
	ResourceID         *string     `json:"resource_id"`
	ErrorCode          *string     `json:"error_code"`
	NeedsAttention     bool        `json:"needs_attention"`
	RequestBytes       int         `json:"request_bytes"`
	ResponseBytes      int         `json:"response_bytes"`
	CreatedAt          time.Time   `json:"created_at"`
	UpdatedAt          time.Time   `json:"updated_at"`
	CompletedAt        *time.Time  `json:"completed_at"`
	History            []apiEvent  `json:"history"`
}

type apiEvent struct {
	At     time.Time       `json:"at"`
	Kind   string          `json:"kind"`
	Actor  string          `json:"actor"`
	Detail json.RawMessage `json:"detail"`
}

// apiKey is GET /api/v1/keys/{id}; a key of a tenant the token may not see is a 404.
func (s *Server) apiKey(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	k, kc, err := s.keyParamIn(ctx, c, r)
	if err != nil {
		return err
	}
	evs, err := kc.claims.History(ctx, k.ID, 1000)
	if err != nil {
		return fmt.Errorf("api key %d: %w", k.ID, err)
	}
	d := apiKeyDetail{ID: k.ID, Tenant: k.Tenant, Operation: k.Operation, Key: k.Key, Digest: k.KeyDigest,
		Fingerprint: k.Fingerprint, FingerprintVersion: k.FingerprintVersion, State: k.State, Attempts: k.Attempts,
		DownstreamKey: k.DownstreamKey, LeaseOwner: k.LeaseOwner, LeaseExpiresAt: k.LeaseExpiresAt,
		LeaseExpired: k.LeaseExpired, ResponseStatus: k.ResponseStatus, ResourceID: k.ResourceID, ErrorCode: k.ErrorCode,
		NeedsAttention: k.NeedsAttention, RequestBytes: len(k.Request), ResponseBytes: len(k.ResponseBody),
		CreatedAt: k.CreatedAt, UpdatedAt: k.UpdatedAt, CompletedAt: k.CompletedAt, History: []apiEvent{}}
	for _, e := range evs {
		d.History = append(d.History, apiEvent{At: e.At, Kind: e.Kind, Actor: e.Actor, Detail: json.RawMessage(e.Detail)})
	}
	c.JSON(http.StatusOK, d)
	return nil
}
