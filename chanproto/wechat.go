package chanproto

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WechatScheme is the Authorization scheme of a WeChat Pay APIv3 request.
const WechatScheme = "WECHATPAY2-SHA256-RSA2048"

// The headers a WeChat Pay APIv3 answer is signed in.
const (
	HeaderWechatTimestamp = "Wechatpay-Timestamp"
	HeaderWechatNonce     = "Wechatpay-Nonce"
	HeaderWechatSignature = "Wechatpay-Signature"
	HeaderWechatSerial    = "Wechatpay-Serial"
	HeaderRequestID       = "Request-ID"
)

// WechatMaxSkew is how far an answer's (or a request's) timestamp may be from the clock: the
// SDKs refuse five minutes and more.
const WechatMaxSkew = 5 * time.Minute

// WechatPublicKeyIDPrefix starts the ID of a WeChat Pay public key (as opposed to a platform
// certificate's serial) in Wechatpay-Serial.
const WechatPublicKeyIDPrefix = "PUB_KEY_ID_"

// WechatRequestMessage is what a request's signature covers: METHOD\nPATH?QUERY\nTIMESTAMP\n
// NONCE\nBODY\n (a GET has an empty body: the line is empty, the newline stays).
func WechatRequestMessage(method, pathQuery string, timestamp int64, nonce string, body []byte) []byte {
	var b strings.Builder
	b.Grow(len(method) + len(pathQuery) + len(nonce) + len(body) + 24)
	b.WriteString(method)
	b.WriteByte('\n')
	b.WriteString(pathQuery)
	b.WriteByte('\n')
	b.WriteString(strconv.FormatInt(timestamp, 10))
	b.WriteByte('\n')
	b.WriteString(nonce)
	b.WriteByte('\n')
	b.Write(body)
	b.WriteByte('\n')
	return []byte(b.String())
}

// WechatResponseMessage is what an answer's (or a callback's) signature covers:
// TIMESTAMP\nNONCE\nBODY\n.
func WechatResponseMessage(timestamp, nonce string, body []byte) []byte {
	out := make([]byte, 0, len(timestamp)+len(nonce)+len(body)+3)
	out = append(out, timestamp...)
	out = append(out, '\n')
	out = append(out, nonce...)
	out = append(out, '\n')
	out = append(out, body...)
	return append(out, '\n')
}

// WechatAuthorization is a request's Authorization header, parsed.
type WechatAuthorization struct {
	MchID, Nonce, Signature, SerialNo string
	Timestamp                         int64
}

// String writes the header value: WECHATPAY2-SHA256-RSA2048 mchid="…",nonce_str="…",
// signature="…",timestamp="…",serial_no="…" (the order of the published example).
func (a WechatAuthorization) String() string {
	return fmt.Sprintf(`%s mchid="%s",nonce_str="%s",signature="%s",timestamp="%d",serial_no="%s"`,
		WechatScheme, a.MchID, a.Nonce, a.Signature, a.Timestamp, a.SerialNo)
}

// ErrAuthorization: an Authorization header that is missing, of another scheme or malformed.
var ErrAuthorization = errors.New("malformed Authorization header")

// ParseWechatAuthorization reads an Authorization header: the scheme, then comma-separated
// name="value" pairs in any order; all five are required. Errors: ErrAuthorization.
func ParseWechatAuthorization(h string) (WechatAuthorization, error) {
	var a WechatAuthorization
	rest, ok := strings.CutPrefix(strings.TrimSpace(h), WechatScheme+" ")
	if !ok {
		return a, fmt.Errorf("%w: not %s", ErrAuthorization, WechatScheme)
	}
	seen := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
			return a, fmt.Errorf("%w: %q is not name=\"value\"", ErrAuthorization, part)
		}
		seen[name] = value[1 : len(value)-1]
	}
	for _, need := range []string{"mchid", "nonce_str", "signature", "timestamp", "serial_no"} {
		if seen[need] == "" {
			return a, fmt.Errorf("%w: no %s", ErrAuthorization, need)
		}
	}
	ts, err := strconv.ParseInt(seen["timestamp"], 10, 64)
	if err != nil {
		return a, fmt.Errorf("%w: timestamp %q", ErrAuthorization, seen["timestamp"])
	}
	return WechatAuthorization{MchID: seen["mchid"], Nonce: seen["nonce_str"], Signature: seen["signature"],
		SerialNo: seen["serial_no"], Timestamp: ts}, nil
}

// SignWechatRequest returns the Authorization header of a request by merchant mchID whose
// certificate has serial, signed with key at now.
func SignWechatRequest(key *rsa.PrivateKey, mchID, serial, method, pathQuery string, body []byte, now time.Time) (string, error) {
	nonce, err := Nonce()
	if err != nil {
		return "", err
	}
	ts := now.Unix()
	sig, err := SignSHA256(key, WechatRequestMessage(method, pathQuery, ts, nonce, body))
	if err != nil {
		return "", err
	}
	return WechatAuthorization{MchID: mchID, Nonce: nonce, Signature: sig, Timestamp: ts, SerialNo: serial}.String(), nil
}

// Nonce is 32 random upper-case hex characters, as in the published examples.
func Nonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return strings.ToUpper(fmt.Sprintf("%x", b)), nil
}

// The ways an answer's signature is refused (VerifyWechatAnswer wraps one of them).
var (
	ErrUnsigned    = errors.New("the answer is not signed")
	ErrWrongSerial = errors.New("the answer is signed by a key this account does not know")
	ErrClockSkew   = errors.New("the answer's timestamp is too far from this clock")
)

// WechatKeys are the keys answers may be signed with, by serial or public key ID: more than one
// during a platform certificate's rotation, when either may sign.
type WechatKeys map[string]*rsa.PublicKey

// SignWechatAnswer sets the answer headers that sign body with the platform key named serial.
func SignWechatAnswer(h http.Header, key *rsa.PrivateKey, serial string, body []byte, now time.Time) error {
	nonce, err := Nonce()
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	sig, err := SignSHA256(key, WechatResponseMessage(ts, nonce, body))
	if err != nil {
		return err
	}
	h.Set(HeaderWechatTimestamp, ts)
	h.Set(HeaderWechatNonce, nonce)
	h.Set(HeaderWechatSignature, sig)
	h.Set(HeaderWechatSerial, serial)
	return nil
}

// VerifyWechatAnswer checks an answer's signature headers against body: the serial must name
// one of keys, the timestamp must be within WechatMaxSkew of now, and the signature must verify.
// Errors: ErrUnsigned, ErrWrongSerial, ErrClockSkew, ErrSignature (each with the serial or the
// timestamp it refers to).
func VerifyWechatAnswer(h http.Header, body []byte, keys WechatKeys, now time.Time) error {
	ts, nonce, sig, serial := h.Get(HeaderWechatTimestamp), h.Get(HeaderWechatNonce), h.Get(HeaderWechatSignature), h.Get(HeaderWechatSerial)
	if ts == "" || nonce == "" || sig == "" || serial == "" {
		return ErrUnsigned
	}
	key, ok := keys[serial]
	if !ok {
		for id, k := range keys { // serials are hex: a lower-case one is the same certificate
			if strings.EqualFold(id, serial) {
				key, ok = k, true
			}
		}
	}
	if !ok {
		return fmt.Errorf("%w (serial %.64s)", ErrWrongSerial, serial)
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w (timestamp %.20q)", ErrClockSkew, ts)
	}
	if d := now.Sub(time.Unix(t, 0)); d >= WechatMaxSkew || d <= -WechatMaxSkew {
		return fmt.Errorf("%w (%s off)", ErrClockSkew, d.Round(time.Second))
	}
	if err := VerifySHA256(key, WechatResponseMessage(ts, nonce, body), sig); err != nil {
		return fmt.Errorf("%w (serial %.64s)", ErrSignature, serial)
	}
	return nil
}

// ErrDecrypt: an encrypted bill part that does not open (a wrong key, a tampered part).
var ErrDecrypt = errors.New("the encrypted bill does not decrypt")

// DecryptWechatBill opens one encrypted bill part: encryptKey (base64) is its AES-256 key under
// RSA-OAEP (SHA-1) with the merchant's public key, opened with the merchant's private key; the
// part is AEAD_AES_256_GCM ciphertext followed by its 16-byte tag, under nonce (the string's
// bytes), without associated data. The plaintext is written over ciphertext's storage.
// Errors: ErrDecrypt.
func DecryptWechatBill(merchant *rsa.PrivateKey, encryptKey, nonce string, ciphertext []byte) ([]byte, error) {
	wrapped, err := base64.StdEncoding.DecodeString(encryptKey)
	if err != nil {
		return nil, fmt.Errorf("%w: encrypt_key is not base64", ErrDecrypt)
	}
	key, err := rsa.DecryptOAEP(sha1.New(), nil, merchant, wrapped, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: encrypt_key does not open with the merchant's private key", ErrDecrypt)
	}
	gcm, err := wechatGCM(key, nonce)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(ciphertext[:0], []byte(nonce), ciphertext, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: the GCM tag does not match", ErrDecrypt)
	}
	return plain, nil
}

// EncryptWechatBill is DecryptWechatBill's other side (paysim's): a fresh AES-256 key and a
// 16-character nonce, the key wrapped for the merchant's public key.
func EncryptWechatBill(merchant *rsa.PublicKey, plaintext []byte) (encryptKey, nonce string, ciphertext []byte, err error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", "", nil, err
	}
	raw := make([]byte, 8)
	if _, err := rand.Read(raw); err != nil {
		return "", "", nil, err
	}
	nonce = fmt.Sprintf("%x", raw)
	gcm, err := wechatGCM(key, nonce)
	if err != nil {
		return "", "", nil, err
	}
	wrapped, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, merchant, key, nil)
	if err != nil {
		return "", "", nil, err
	}
	return base64.StdEncoding.EncodeToString(wrapped), nonce, gcm.Seal(nil, []byte(nonce), plaintext, nil), nil
}

func wechatGCM(key []byte, nonce string) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("%w: the key is %d bytes, AEAD_AES_256_GCM takes 32", ErrDecrypt, len(key))
	}
	if len(nonce) < 12 || len(nonce) > 64 {
		return nil, fmt.Errorf("%w: the nonce is %d bytes", ErrDecrypt, len(nonce))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithNonceSize(block, len(nonce))
}
