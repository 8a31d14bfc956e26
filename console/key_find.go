package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/templates"
)

// findKey turns an exact key into its digest on the server and redirects to a search by
// digest: the key itself never appears in a URL, a log line or the audit log.
func (s *Server) findKey(c *gin.Context, r *request) error {
	tenant, operation, key := strings.TrimSpace(c.PostForm("tenant")), strings.TrimSpace(c.PostForm("operation")), c.PostForm("key")
	if tenant == "" && operation == "" {
		return s.findKeyAnywhere(c, r, key)
	}
	if tenant == "" || operation == "" {
		return inputErr("tenant", "an exact key search needs the tenant and the operation (the digest covers all three)")
	}
	if err := claim.ValidateKey(key); err != nil {
		return err
	}
	q := url.Values{}
	q.Set("tenant", tenant)
	q.Set("operation", operation)
	q.Set("digest", claim.Digest(s.cfg.DigestSecret, tenant, operation, key))
	c.Redirect(http.StatusSeeOther, "/keys?"+q.Encode())
	return nil
}

// findKeyAnywhere is the header's find box: the raw key arrives in the POST body and is looked
// up in every tenant and operation the operator may see. One match opens the key; several
// answer a chooser (tenant · operation · key); none an empty state. The key never appears in
// a URL: the chooser is the POST's own answer and a single match redirects by id.
func (s *Server) findKeyAnywhere(c *gin.Context, r *request, key string) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	rows, err := s.findKeys(ctx, r.op, key)
	if err != nil {
		return err
	}
	if len(rows) == 1 {
		c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", rows[0].ID))
		return nil
	}
	v := templates.KeyFindView{Key: key, Limit: MaxFound, Truncated: len(rows) >= MaxFound}
	for _, k := range rows {
		v.Rows = append(v.Rows, templates.KeyRow{ID: k.ID, Href: fmt.Sprintf("/keys/%d", k.ID), Tenant: k.Tenant,
			Operation: k.Operation, Key: k.Key, DigestShort: k.KeyDigest[:12], State: string(k.State),
			Attempts: k.Attempts, CreatedAt: k.CreatedAt, NeedsAttention: k.NeedsAttention,
			AmountMinor: k.AmountMinor, Currency: deref(k.Currency)})
	}
	s.render(c, http.StatusOK, templates.KeyFindPage(chrome(r, "keys"), v))
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
	rows, err := s.findKeys(ctx, r.op, body.Key)
	if err != nil {
		return err
	}
	if rows == nil {
		rows = []KeySummary{}
	}
	c.JSON(http.StatusOK, gin.H{"keys": rows, "next_cursor": nil})
	return nil
}
