package claim

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxKeyLen is the longest accepted idempotency key (Stripe's limit).
const MaxKeyLen = 255

// ValidateKey checks a client key: 1–255 printable ASCII characters.
func ValidateKey(key string) error {
	if key == "" {
		return fieldErr(ErrInvalidKey, "key", "must not be empty")
	}
	if len(key) > MaxKeyLen {
		return fieldErr(ErrInvalidKey, "key", "is %d characters long, at most %d allowed", len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fieldErr(ErrInvalidKey, "key", "character %d is not printable ASCII", i+1)
		}
	}
	return nil
}

// validateScope checks tenant and operation: they are joined with '|' for digests, so they may
// not hold one; the key (last) may.
func validateScope(tenant, operation string) error {
	for _, f := range []struct{ name, v string }{{"tenant", tenant}, {"operation", operation}} {
		switch {
		case f.v == "":
			return fieldErr(ErrInvalidScope, f.name, "must not be empty")
		case len(f.v) > 128:
			return fieldErr(ErrInvalidScope, f.name, "is longer than 128 characters")
		case strings.ContainsAny(f.v, "|\x00\n\r"):
			return fieldErr(ErrInvalidScope, f.name, "must not contain '|' or control characters")
		}
	}
	return nil
}

// Digest is the only form of a key that logs carry: HMAC-SHA256 of tenant|operation|key under
// the deployment secret, so a leaked log line cannot be brute-forced back to a key.
func Digest(secret []byte, tenant, operation, key string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tenant + "|" + operation + "|" + key))
	return hex.EncodeToString(m.Sum(nil))
}

// DownstreamKey is the idempotency key sent downstream (the merchant order number at a payment
// channel). It is derived without a secret, so it survives secret rotation and purges: every
// retry, even a late one after the key was purged, sends the same one. 32 hex characters fit the
// strictest channel limit (WeChat Pay's out_trade_no).
func DownstreamKey(tenant, operation, key string) string {
	sum := sha256.Sum256([]byte("idemops/downstream/v1|" + tenant + "|" + operation + "|" + key))
	return hex.EncodeToString(sum[:16])
}
