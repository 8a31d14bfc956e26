package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// tokenPrefix marks idemops API tokens, so a leaked one is recognizable in a secret scanner.
const tokenPrefix = "idemops_"

// hashSecret is the stored form of a session id or token: SHA-256, hex-encoded for the query
// (bound as text and decoded in SQL).
func hashSecret(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// tokenHash is the stored form of a bearer token: its SHA-256.
func tokenHash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// RandomSecret is n random bytes, base64url-encoded: session ids, tokens, SSO state and nonces.
func RandomSecret(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// CreateToken makes an API token for operator name, valid for ttl (0: no expiry), and returns
// the bearer secret; only its hash is stored, so it is shown once.
func (d *Operators) CreateToken(ctx context.Context, ch Change, name, label string, ttl time.Duration) (string, error) {
	label = strings.TrimSpace(label)
	if label == "" || len(label) > 64 {
		return "", fieldErr("token name", "use 1–64 characters")
	}
	secret := tokenPrefix + RandomSecret(32)
	var expires *time.Time
	if ttl > 0 {
		t := time.Now().Add(ttl)
		expires = &t
	}
	err := d.update(ctx, ch, name, "token.create", map[string]any{"token": label}, nil, func(tx *gorm.DB, id int64) error {
		return tx.Create(&tokenModel{OperatorID: id, Name: label, TokenHash: tokenHash(secret), ExpiresAt: expires}).Error
	})
	if err != nil {
		return "", err
	}
	return secret, nil
}

// ByToken returns the enabled operator owning a live bearer token.
func (d *Operators) ByToken(ctx context.Context, secret string) (*Operator, error) {
	if !strings.HasPrefix(secret, tokenPrefix) || len(secret) > 128 {
		return nil, ErrUnauthenticated
	}
	var live []tokenModel
	err := d.db.WithContext(ctx).Model(&live).Clauses(clause.Returning{Columns: []clause.Column{{Name: "operator_id"}}}).
		Where("token_hash = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())", tokenHash(secret)).
		Update("last_used_at", gorm.Expr("now()")).Error
	if err != nil {
		return nil, fmt.Errorf("check token: %w", err)
	}
	if len(live) == 0 {
		return nil, ErrUnauthenticated
	}
	o, err := d.ByID(ctx, live[0].OperatorID)
	if err != nil || o.Disabled {
		return nil, ErrUnauthenticated
	}
	return o, nil
}
