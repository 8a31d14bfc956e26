package chanproto

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// ErrKey: a key or certificate that does not parse, or is not RSA.
var ErrKey = errors.New("not an RSA key or certificate in PEM")

// ErrSignature: a signature that does not verify (or is not base64).
var ErrSignature = errors.New("signature does not verify")

// ParsePrivateKey reads an RSA private key in PEM, PKCS #8 ("PRIVATE KEY", what WeChat Pay's
// apiclient_key.pem holds) or PKCS #1 ("RSA PRIVATE KEY"). A bare base64 body (how Alipay's
// key tool shows keys) is read as PKCS #8, then PKCS #1.
func ParsePrivateKey(text []byte) (*rsa.PrivateKey, error) {
	der, err := pemBody(text, "PRIVATE KEY", "RSA PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if rk, ok := k.(*rsa.PrivateKey); ok {
			return rk, nil
		}
		return nil, fmt.Errorf("%w: the private key is not RSA", ErrKey)
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("%w: the private key is neither PKCS #8 nor PKCS #1", ErrKey)
}

// PublicKey is an RSA public key with the id a channel names it by: a platform certificate's
// serial (upper-case hex), a WeChat Pay public key's ID, or "" when none was given.
type PublicKey struct {
	ID  string
	Key *rsa.PublicKey
}

// ParsePublicKey reads an RSA public key from a certificate ("CERTIFICATE": its ID is the
// serial number, upper-case hex, as WeChat Pay writes it), a PKIX "PUBLIC KEY", a PKCS #1 "RSA
// PUBLIC KEY", or a bare base64 PKIX body (Alipay's). id, when not empty, is the ID of a key
// that is not a certificate; for a certificate it must match the serial.
func ParsePublicKey(text []byte, id string) (PublicKey, error) {
	der, err := pemBody(text, "CERTIFICATE", "PUBLIC KEY", "RSA PUBLIC KEY")
	if err != nil {
		return PublicKey{}, err
	}
	if cert, err := x509.ParseCertificate(der); err == nil {
		k, ok := cert.PublicKey.(*rsa.PublicKey)
		if !ok {
			return PublicKey{}, fmt.Errorf("%w: the certificate's key is not RSA", ErrKey)
		}
		serial := CertificateSerial(cert)
		if id != "" && !strings.EqualFold(id, serial) {
			return PublicKey{}, fmt.Errorf("%w: the certificate's serial is %s, not %s", ErrKey, serial, id)
		}
		return PublicKey{ID: serial, Key: k}, nil
	}
	if k, err := x509.ParsePKIXPublicKey(der); err == nil {
		rk, ok := k.(*rsa.PublicKey)
		if !ok {
			return PublicKey{}, fmt.Errorf("%w: the public key is not RSA", ErrKey)
		}
		return PublicKey{ID: id, Key: rk}, nil
	}
	if k, err := x509.ParsePKCS1PublicKey(der); err == nil {
		return PublicKey{ID: id, Key: k}, nil
	}
	return PublicKey{}, fmt.Errorf("%w: neither a certificate nor a public key", ErrKey)
}

// CertificateSerial is a certificate's serial as WeChat Pay writes it: upper-case hex.
func CertificateSerial(cert *x509.Certificate) string {
	return strings.ToUpper(cert.SerialNumber.Text(16))
}

// EncodePublicKey writes k as a PKIX "PUBLIC KEY" PEM.
func EncodePublicKey(k *rsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// EncodePrivateKey writes k as a PKCS #8 "PRIVATE KEY" PEM.
func EncodePrivateKey(k *rsa.PrivateKey) []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// pemBody is the DER of the first PEM block of one of types, or of a bare base64 body.
func pemBody(text []byte, types ...string) ([]byte, error) {
	if len(text) > 64<<10 {
		return nil, fmt.Errorf("%w: more than 64 KiB", ErrKey)
	}
	if block, _ := pem.Decode(text); block != nil {
		for _, t := range types {
			if block.Type == t {
				return block.Bytes, nil
			}
		}
		return nil, fmt.Errorf("%w: a PEM %q block, want %s", ErrKey, block.Type, strings.Join(types, " or "))
	}
	bare := strings.Join(strings.Fields(string(text)), "")
	der, err := base64.StdEncoding.DecodeString(bare)
	if err != nil || len(der) == 0 {
		return nil, ErrKey
	}
	return der, nil
}

// SignSHA256 is SHA256withRSA (PKCS #1 v1.5) of msg by k, base64: the signature WeChat Pay
// APIv3 and Alipay RSA2 both use.
func SignSHA256(k *rsa.PrivateKey, msg []byte) (string, error) {
	sum := sha256.Sum256(msg)
	sig, err := rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// VerifySHA256 checks a base64 SHA256withRSA signature of msg with k. Errors: ErrSignature.
func VerifySHA256(k *rsa.PublicKey, msg []byte, sigB64 string) error {
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(sigB64))
	if err != nil || len(sig) == 0 {
		return fmt.Errorf("%w: not base64", ErrSignature)
	}
	sum := sha256.Sum256(msg)
	if err := rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig); err != nil {
		return ErrSignature
	}
	return nil
}
