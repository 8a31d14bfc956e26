package chanproto

import (
	"bytes"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// AlipaySignContent is what an Alipay request's sign covers: every parameter but sign (and
// those with an empty value), sorted by name, written name=value and joined with & — the raw
// values, not URL-encoded.
func AlipaySignContent(params url.Values) []byte {
	names := make([]string, 0, len(params))
	for name, vs := range params {
		if name == "sign" || len(vs) == 0 || vs[0] == "" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for i, name := range names {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(params.Get(name))
	}
	return b.Bytes()
}

// SignAlipayRequest sets params' sign (RSA2) with the application's private key.
func SignAlipayRequest(key *rsa.PrivateKey, params url.Values) error {
	sig, err := SignSHA256(key, AlipaySignContent(params))
	if err != nil {
		return err
	}
	params.Set("sign", sig)
	return nil
}

// VerifyAlipayRequest checks a request's sign (paysim's side of SignAlipayRequest).
// Errors: ErrUnsigned (no sign), ErrSignature.
func VerifyAlipayRequest(key *rsa.PublicKey, params url.Values) error {
	if params.Get("sign") == "" {
		return ErrUnsigned
	}
	return VerifySHA256(key, AlipaySignContent(params), params.Get("sign"))
}

// AlipayAnswer is a gateway answer split into the member the signature covers.
type AlipayAnswer struct {
	// Member is the answer's member name: "<method with _ for .>_response", or "error_response".
	Member string
	// Content is that member's exact text, as signed.
	Content json.RawMessage
	// Sign is the answer's signature ("" when the answer carries none).
	Sign string
}

// ErrAlipayAnswer: a gateway answer that is not a JSON object with one "…_response" member.
var ErrAlipayAnswer = errors.New("not an Alipay gateway answer")

// AlipayResponseMember is the name of method's answer member:
// alipay.data.dataservice.bill.downloadurl.query → alipay_data_dataservice_bill_downloadurl_query_response.
func AlipayResponseMember(method string) string {
	return strings.ReplaceAll(method, ".", "_") + "_response"
}

// ParseAlipayAnswer reads a gateway answer for method: its "<method>_response" member (or
// "error_response", which the gateway answers for a refused request), exactly as written, and
// its sign. Errors: ErrAlipayAnswer.
func ParseAlipayAnswer(body []byte, method string) (AlipayAnswer, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return AlipayAnswer{}, fmt.Errorf("%w: %v", ErrAlipayAnswer, err)
	}
	a := AlipayAnswer{Member: AlipayResponseMember(method)}
	content, ok := top[a.Member]
	if !ok {
		a.Member = "error_response"
		if content, ok = top[a.Member]; !ok {
			return AlipayAnswer{}, fmt.Errorf("%w: no %s member", ErrAlipayAnswer, AlipayResponseMember(method))
		}
	}
	a.Content = content
	if raw, ok := top["sign"]; ok {
		if err := json.Unmarshal(raw, &a.Sign); err != nil {
			return AlipayAnswer{}, fmt.Errorf("%w: sign is not a string", ErrAlipayAnswer)
		}
	}
	return a, nil
}

// Verify checks the answer's signature over its member's exact text with Alipay's public key.
// Errors: ErrUnsigned, ErrSignature.
func (a AlipayAnswer) Verify(key *rsa.PublicKey) error {
	if a.Sign == "" {
		return ErrUnsigned
	}
	return VerifySHA256(key, a.Content, a.Sign)
}

// SignAlipayAnswer writes a gateway answer (paysim's side): {"<member>":content,"sign":"…"}.
func SignAlipayAnswer(key *rsa.PrivateKey, member string, content []byte) ([]byte, error) {
	sig, err := SignSHA256(key, content)
	if err != nil {
		return nil, err
	}
	name, _ := json.Marshal(member)
	signJSON, _ := json.Marshal(sig)
	var b bytes.Buffer
	b.WriteByte('{')
	b.Write(name)
	b.WriteByte(':')
	b.Write(content)
	b.WriteString(`,"sign":`)
	b.Write(signJSON)
	b.WriteByte('}')
	return b.Bytes(), nil
}
