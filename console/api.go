package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
)

// apiKeys is GET /api/v1/keys: the key search with the page's filters; the next page is asked
// for with ?after=<next_cursor>.
func (s *Server) apiKeys(c *gin.Context, r *request) error {
	q := c.Request.URL.Query()
	if cur := q.Get("cursor"); cur != "" && q.Get("after") == "" {
		q.Set("after", cur)
	}
	f, err := ParseKeyFilter(q)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, next, err := SearchKeys(ctx, s.db, r.op, f)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []KeySummary{}
	}
	out := gin.H{"keys": rows, "next_cursor": nil}
	if next != nil {
		out["next_cursor"] = next.String()
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// findBody is the body of POST /api/v1/keys/find: the raw key travels in the body, never in
// the URL.
type findBody struct {
	Key string `json:"key"`
}

// apiFindKey is POST /api/v1/keys/find: the keys the caller may see whose raw key is exactly
// the one given, in every tenant and operation, in the shape of GET /api/v1/keys (no further
// page: at most MaxFound).
func (s *Server) apiFindKey(c *gin.Context, r *request) error {
	var body findBody
	if err := bindJSON(c, &body); err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, err := FindKeys(ctx, s.db, r.op, body.Key)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []KeySummary{}
	}
	c.JSON(http.StatusOK, gin.H{"keys": rows, "next_cursor": nil})
	return nil
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
	k, err := s.keyParam(ctx, c, r)
	if err != nil {
		return err
	}
	evs, err := s.claims.History(ctx, k.ID, 1000)
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
