package httpidem

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"
)

// HeaderToken carries a one-time token in place of an Idempotency-Key.
const HeaderToken = "Idempotency-Token"

// Errors of Tokens.Redeem.
var (
	// ErrTokenUnknown: no such token — never issued, issued to another tenant or for another
	// operation (the three answer alike, so a token of another tenant is not confirmed), or
	// swept long after it expired.
	ErrTokenUnknown = errors.New("unknown one-time token")
	// ErrTokenExpired: the token was issued and never used, and its TTL has passed.
	ErrTokenExpired = errors.New("one-time token expired")
)

func init() {
	Problems["token-unknown"] = "The Idempotency-Token is unknown: never issued, issued to another tenant or for another operation. Ask for a new token."
	Problems["token-expired"] = "The Idempotency-Token was never used and has expired. Ask for a new token."
}

// Tokens issues and redeems one-time tokens for one operation (the second seed's scheme 5,
// "take a ticket, then spend it"): the server issues a token, bound to the tenant, with a TTL,
// stored only as its SHA-256; a later request sends it in Idempotency-Token and it becomes the
// request's idempotency key ("token:<sha256>"). So a token reused — a double click, a retry —
// replays like a reused key, and a token whose first use is still running answers 409.
type Tokens struct {
	DB        *gorm.DB
	Operation string
	// TTL is how long an issued token may be first used (default 10 min, at most 24 h).
	TTL time.Duration
}

// tokenSweepBatch bounds how many long-expired tokens one Issue deletes.
const tokenSweepBatch = 100

// Issue makes a token for tenant. The raw token is returned once and never stored.
func (t *Tokens) Issue(ctx context.Context, tenant string) (string, time.Time, error) {
	ttl := t.TTL
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	if ttl < 0 || ttl > 24*time.Hour || t.Operation == "" || tenant == "" {
		return "", time.Time{}, fmt.Errorf("tokens: an operation, a tenant and a TTL of at most 24h are required")
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, err
	}
	tok := "tok_" + base64.RawURLEncoding.EncodeToString(raw[:])
	var exp time.Time
	err := t.DB.WithContext(ctx).Raw(`INSERT INTO one_time_tokens (token_hash, tenant, operation, expires_at)
		VALUES (?, ?, ?, now() + ? * interval '1 millisecond') RETURNING expires_at`,
		tokenHash(tok), tenant, t.Operation, ttl.Milliseconds()).Scan(&exp).Error
	if err != nil {
		return "", time.Time{}, fmt.Errorf("issue token: %w", err)
	}
	// Sweep a bounded batch of tokens expired for a day (a used one is replayed by its key
	// until then; after that its key still exists, only the token is forgotten).
	t.DB.WithContext(ctx).Exec(`DELETE FROM one_time_tokens WHERE token_hash IN (
		SELECT token_hash FROM one_time_tokens WHERE expires_at < now() - interval '1 day' LIMIT ?)`, tokenSweepBatch)
	return tok, exp, nil
}

// Redeem checks a token for tenant and returns the idempotency key it stands for. An unused,
// unexpired token is marked used; a used one redeems again (the key then replays).
func (t *Tokens) Redeem(ctx context.Context, tenant, token string) (string, error) {
	if !strings.HasPrefix(token, "tok_") || len(token) > 100 {
		return "", ErrTokenUnknown
	}
	h := tokenHash(token)
	var rows []struct {
		Tenant, Operation string
		Live, Used        bool
	}
	err := t.DB.WithContext(ctx).Raw(`SELECT tenant, operation, expires_at > now() AS live, used_at IS NOT NULL AS used
		FROM one_time_tokens WHERE token_hash = ?`, h).Scan(&rows).Error
	switch {
	case err != nil:
		return "", fmt.Errorf("redeem token: %w", err)
	case len(rows) == 0 || rows[0].Tenant != tenant || rows[0].Operation != t.Operation:
		return "", ErrTokenUnknown
	case !rows[0].Used && !rows[0].Live:
		return "", ErrTokenExpired
	case !rows[0].Used:
		if err := t.DB.WithContext(ctx).Exec(`UPDATE one_time_tokens SET used_at = now() WHERE token_hash = ? AND used_at IS NULL`, h).Error; err != nil {
			return "", fmt.Errorf("redeem token: %w", err)
		}
	}
	return "token:" + h, nil
}

func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// IssueTokenHandler answers POST on the route a service mounts for tokens: 201
// {"token", "expires_at"} for the authenticated tenant.
func IssueTokenHandler(cfg Config, t *Tokens) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		tenant, err := ginTenant(cfg, c)(c.Request)
		if err != nil || tenant == "" {
			abortProblem(c, cfg, http.StatusUnauthorized, "unauthenticated", "Not authenticated", "a valid credential is required", nil)
			return
		}
		tok, exp, err := t.Issue(c.Request.Context(), tenant)
		if err != nil {
			cfg.Logger.Error("issue token", "err", err)
			abortProblem(c, cfg, http.StatusInternalServerError, "internal", "Internal error", "the token could not be issued", nil)
			return
		}
		c.Header("Cache-Control", "no-store")
		b, _ := json.Marshal(map[string]any{"token": tok, "expires_at": exp.UTC(), "operation": t.Operation})
		c.Data(http.StatusCreated, "application/json", b)
	}
}

// AcceptToken is the token hook: placed before a route's Handler or Middleware, it turns an
// Idempotency-Token header into the Idempotency-Key the token stands for, so everything after
// it — claim, replay, 409, 422 — is the ordinary key contract. A request without the header
// passes untouched (it may use an ordinary key); both headers at once → 400 key-malformed; an
// unknown or other tenant's token → 400 token-unknown; an expired unused one → 400
// token-expired.
func AcceptToken(cfg Config, t *Tokens) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		vals := c.Request.Header.Values(HeaderToken)
		if len(vals) == 0 {
			return
		}
		if len(vals) > 1 || len(c.Request.Header.Values(HeaderKey)) > 0 {
			abortProblem(c, cfg, http.StatusBadRequest, "key-malformed", "Malformed Idempotency-Token",
				"send exactly one Idempotency-Token, or an Idempotency-Key, not both", nil)
			return
		}
		tenant, err := ginTenant(cfg, c)(c.Request)
		if err != nil || tenant == "" {
			abortProblem(c, cfg, http.StatusUnauthorized, "unauthenticated", "Not authenticated", "a valid credential is required", nil)
			return
		}
		key, err := t.Redeem(c.Request.Context(), tenant, strings.TrimSpace(vals[0]))
		switch {
		case errors.Is(err, ErrTokenUnknown):
			abortProblem(c, cfg, http.StatusBadRequest, "token-unknown", "Unknown Idempotency-Token", Problems["token-unknown"], nil)
			return
		case errors.Is(err, ErrTokenExpired):
			abortProblem(c, cfg, http.StatusBadRequest, "token-expired", "Idempotency-Token expired", Problems["token-expired"], nil)
			return
		case err != nil:
			cfg.Logger.Error("redeem token", "err", err)
			abortProblem(c, cfg, http.StatusInternalServerError, "internal", "Internal error", "the token could not be checked; retry", nil)
			return
		}
		c.Request.Header.Del(HeaderToken)
		c.Request.Header.Set(HeaderKey, key)
	}
}

// abortProblem answers a gin request with a problem and stops its handler chain.
func abortProblem(c *gin.Context, cfg Config, status int, typ, title, detail string, resourceID *string) {
	writeProblem(c.Writer, cfg, status, typ, title, detail, resourceID)
	c.Abort()
}
