package reconcile

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/idemops/idemops/errs"
)

// Keyring seals the secrets reconciliation keeps at rest — channel credentials, the secret parts
// of job sources — with AES-256-GCM under a key derived (HKDF-SHA256) from the deployment
// secret. During a change of the deployment secret the previous one is given too: what it sealed
// still opens, and RekeyCredentials seals it again under the current key; two keys are valid
// until the switch is done.
type Keyring struct {
	current  ringKey
	previous []ringKey
}

type ringKey struct {
	id   string // hex of the first 4 bytes of SHA-256 of the key: which key sealed a value
	aead cipher.AEAD
}

// ErrSealed: a sealed value that opens under no key of the keyring (a key that is gone, or a
// value moved to another row).
var ErrSealed = errs.New(errs.Unavailable, "a sealed credential does not open with the deployment secret")

// keyringInfo separates this key from anything else derived from the same secret.
const keyringInfo = "idemops reconcile credentials v1"

// NewKeyring derives the keyring from the deployment secret (at least 16 bytes) and, during a
// rotation, the previous secrets.
func NewKeyring(secret []byte, previous ...[]byte) (*Keyring, error) {
	cur, err := deriveRingKey(secret)
	if err != nil {
		return nil, err
	}
	k := &Keyring{current: cur}
	for _, p := range previous {
		if len(p) == 0 {
			continue
		}
		pk, err := deriveRingKey(p)
		if err != nil {
			return nil, fmt.Errorf("previous secret: %w", err)
		}
		if pk.id != cur.id {
			k.previous = append(k.previous, pk)
		}
	}
	return k, nil
}

func deriveRingKey(secret []byte) (ringKey, error) {
	if len(secret) < 16 {
		return ringKey{}, errors.New("reconcile: the deployment secret must be at least 16 bytes")
	}
	key, err := hkdf.Key(sha256.New, secret, nil, keyringInfo, 32)
	if err != nil {
		return ringKey{}, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return ringKey{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return ringKey{}, err
	}
	sum := sha256.Sum256(key)
	return ringKey{id: hex.EncodeToString(sum[:4]), aead: aead}, nil
}

// KeyID names the key new values are sealed with.
func (k *Keyring) KeyID() string { return k.current.id }

// sealVersion starts every sealed value: version 1 is key id (4 bytes) | nonce | ciphertext.
const sealVersion = 1

// Seal encrypts plain under the current key; where (the row and field it is for) is bound to
// it as associated data, so a sealed value copied to another row does not open there.
func (k *Keyring) Seal(plain []byte, where string) []byte {
	id, _ := hex.DecodeString(k.current.id)
	nonce := make([]byte, k.current.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	out := append([]byte{sealVersion}, id...)
	out = append(out, nonce...)
	return k.current.aead.Seal(out, nonce, plain, []byte(where))
}

// Open decrypts a value Seal made for where, under whichever key of the ring sealed it; it also
// says which key that was. Errors: ErrSealed.
func (k *Keyring) Open(sealed []byte, where string) (plain []byte, keyID string, err error) {
	if len(sealed) < 5 || sealed[0] != sealVersion {
		return nil, "", fmt.Errorf("%w (not a sealed value)", ErrSealed)
	}
	id := hex.EncodeToString(sealed[1:5])
	for _, rk := range append([]ringKey{k.current}, k.previous...) {
		if rk.id != id {
			continue
		}
		ns := rk.aead.NonceSize()
		if len(sealed) < 5+ns {
			break
		}
		plain, err := rk.aead.Open(nil, sealed[5:5+ns], sealed[5+ns:], []byte(where))
		if err != nil {
			return nil, "", fmt.Errorf("%w (key %s: it was altered or belongs elsewhere)", ErrSealed, id)
		}
		return plain, id, nil
	}
	return nil, "", fmt.Errorf("%w (sealed under key %s, which this deployment no longer has)", ErrSealed, id)
}
