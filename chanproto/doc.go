// Package chanproto holds the payment channels' wire protocols that both sides of a statement
// fetch must agree on byte for byte: what a WeChat Pay APIv3 request and answer sign, how an
// Authorization header is written and read, how an encrypted WeChat bill is opened, what an
// Alipay request and answer sign, and the RSA keys and certificates they use.
//
// It is a leaf, like money: reconcile's fetchers sign requests and verify answers with it, and
// paysim (downstream/paysim) verifies the merchant's signatures and signs its answers with it,
// so a simulator and a client never disagree by having two copies of a signing string. What
// keeps one copy honest are the channels' own published examples (chanproto's tests cite them).
//
// No official WeChat Pay or Alipay Go SDK is used: everything here is the standard library
// (crypto/rsa, crypto/x509, crypto/aes with cipher.NewGCM).
//
// # WeChat Pay APIv3 (https://pay.weixin.qq.com/doc/v3/merchant/4012365336, 签名生成/验证签名)
//
// A request is signed by the merchant's private key, SHA256withRSA (PKCS #1 v1.5), over
//
//	METHOD\nPATH?QUERY\nTIMESTAMP\nNONCE\nBODY\n
//
// and carries Authorization: WECHATPAY2-SHA256-RSA2048 mchid="…",nonce_str="…",signature="…",
// timestamp="…",serial_no="…" (serial_no: the merchant certificate's serial, upper-case hex). An
// answer is signed by the platform over TIMESTAMP\nNONCE\nBODY\n, in the Wechatpay-Timestamp,
// -Nonce, -Signature and -Serial headers; the serial names the platform certificate, or the
// WeChat Pay public key (an ID "PUB_KEY_ID_…") that verifies it. A bill download answers
// unsigned: its SHA1 is compared with the hash_value the bill query gave. An encrypted bill's
// part comes with encrypt_key (its AES-256 key, RSA-OAEP/SHA-1 under the merchant's public key,
// base64) and nonce; the part is AEAD_AES_256_GCM ciphertext with the 16-byte tag at its end and
// no associated data.
//
// # Alipay (https://opendocs.alipay.com/common/02kf5q, 自行实现签名)
//
// A request's parameters, without sign and without empty values, sorted by name and joined as
// name=value&…, are signed SHA256withRSA (RSA2) by the application's private key; the answer's
// signature covers the exact text of its "…_response" member and is verified with Alipay's
// public key.
package chanproto
