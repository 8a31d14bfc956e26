package reconcile

import (
	"context"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/errs"
)

// WeChat Pay APIv3 (https://pay.weixin.qq.com/doc/v3/merchant/4013071238 申请交易账单,
// 4013071240 申请资金账单, 4013071241 下载账单): the bill query is a GET signed with the merchant's
// private key (chanproto.SignWechatRequest) whose answer must be signed by a platform key the
// account knows, within five minutes of this clock. It answers {hash_type, hash_value,
// download_url} — or, for bills WeChat Pay splits or encrypts, {download_bill_count,
// download_bill_list: [{bill_sequence, download_url, hash_type, hash_value, encrypt_key,
// nonce}]}. Each download is a signed GET whose answer is not signed, made within the URL's
// life; its SHA1 must be hash_value: of the bill decompressed ("原始账单(gzip需要解压缩)的摘要值")
// for a plain bill, of the part as downloaded for an encrypted one, which is then opened with
// AEAD_AES_256_GCM (chanproto.DecryptWechatBill). Parts are joined in bill_sequence order.
//
// A bill is generated from 09:00 the next day (Asia/Shanghai; fetch after 10:00):
// STATEMENT_CREATING is "not ready" at any time, NO_STATEMENT_EXIST is "not ready" until 10:00
// of the day after the bill date and "there is no bill" after it.

type wechatFetcher struct{ r *Reconciler }

func (wechatFetcher) Name() string { return FetcherWechatPay }

// wechatClient is one account's signing key and the keys its answers are signed with.
type wechatClient struct {
	r        *Reconciler
	key      *rsa.PrivateKey
	mchID    string
	serial   string
	platform chanproto.WechatKeys
}

// maxEncryptedPart bounds an encrypted bill part: it is opened in memory (GCM authenticates
// the whole part before a byte of it may be used).
const maxEncryptedPart = 256 << 20

// wechatBillPaths are the bill queries by bill name.
var wechatBillPaths = map[string]string{
	"tradebill":    "/v3/bill/tradebill?bill_date=%s&bill_type=ALL&tar_type=GZIP",
	"fundflowbill": "/v3/bill/fundflowbill?bill_date=%s&account_type=BASIC&tar_type=GZIP",
}

// wechatBillAnswer is a bill query's answer, in either shape.
type wechatBillAnswer struct {
	HashType          string           `json:"hash_type"`
	HashValue         string           `json:"hash_value"`
	DownloadURL       string           `json:"download_url"`
	DownloadBillCount int              `json:"download_bill_count"`
	DownloadBillList  []wechatBillPart `json:"download_bill_list"`
}

type wechatBillPart struct {
	BillSequence int    `json:"bill_sequence"`
	DownloadURL  string `json:"download_url"`
	HashType     string `json:"hash_type"`
	HashValue    string `json:"hash_value"`
	EncryptKey   string `json:"encrypt_key"`
	Nonce        string `json:"nonce"`
}

// wechatError is an error answer's body.
type wechatError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (f wechatFetcher) Fetch(ctx context.Context, req FetchRequest) (*Fetched, error) {
	r := f.r
	s := req.Account.Settings
	key, serial, err := r.privateKey(ctx, req.Account.Channel, CredMerchantPrivateKey)
	if err != nil {
		return nil, err
	}
	if serial == "" {
		return nil, errs.Errorf("%w: the merchant_private_key credential has no label: set it to the merchant certificate's serial", ErrFetch)
	}
	platform, err := s.wechatKeys()
	if err != nil || len(platform) == 0 {
		return nil, errs.Errorf("%w: the account's platform_keys do not parse", ErrFetch)
	}
	c := &wechatClient{r: r, key: key, mchID: s.MchID, serial: serial, platform: platform}
	bill := req.Job.Bill
	if bill == "" {
		bill = "tradebill"
	}
	path, ok := wechatBillPaths[bill]
	if !ok {
		return nil, errs.Errorf("%w: %s is not a WeChat Pay bill", ErrFetch, bill)
	}
	queried := r.cfg.Now()
	answer, err := c.query(ctx, s.apiBase(KindWechatPay)+fmt.Sprintf(path, req.BillDate), req.BillDate)
	if err != nil {
		return nil, err
	}
	life := time.Duration(s.DownloadURLLifeSeconds) * time.Second
	if life == 0 {
		life = 30 * time.Second
	}
	deadline := queried.Add(life)
	if answer.DownloadURL != "" {
		part := wechatBillPart{BillSequence: 1, DownloadURL: answer.DownloadURL, HashType: answer.HashType, HashValue: answer.HashValue}
		out, err := c.download(ctx, part, deadline)
		if err != nil {
			return nil, err
		}
		out.Note = fmt.Sprintf("%s, 1 part, SHA1 checked", bill)
		return out, nil
	}
	parts, err := billParts(answer)
	if err != nil {
		return nil, err
	}
	joined, err := r.tempFile()
	if err != nil {
		return nil, err
	}
	out := &Fetched{f: joined, temp: true}
	h := sha256.New()
	encrypted := 0
	for _, p := range parts {
		if p.EncryptKey != "" {
			encrypted++
		}
		if err := c.appendPart(ctx, p, deadline, io.MultiWriter(joined, h), &out.size); err != nil {
			out.close()
			return nil, err
		}
	}
	if _, err := joined.Seek(0, io.SeekStart); err != nil {
		out.close()
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	out.sha = hex.EncodeToString(h.Sum(nil))
	out.Note = fmt.Sprintf("%s, %d parts in bill_sequence order (%d encrypted), SHA1 checked", bill, len(parts), encrypted)
	return out, nil
}

// billParts checks a split answer: download_bill_count parts numbered 1..n, returned in order.
func billParts(a *wechatBillAnswer) ([]wechatBillPart, error) {
	parts := append([]wechatBillPart(nil), a.DownloadBillList...)
	if len(parts) == 0 || len(parts) > 64 {
		return nil, errs.Errorf("%w: the bill query answered %d download parts", ErrFetch, len(parts))
	}
	if a.DownloadBillCount != len(parts) {
		return nil, errs.Errorf("%w: the bill query announced %d parts and listed %d", ErrFetch, a.DownloadBillCount, len(parts))
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].BillSequence < parts[j].BillSequence })
	for i, p := range parts {
		if p.BillSequence != i+1 {
			return nil, errs.Errorf("%w: the bill's parts are not numbered 1 to %d", ErrFetch, len(parts))
		}
	}
	return parts, nil
}

// query makes the signed bill query and verifies its answer.
func (c *wechatClient) query(ctx context.Context, rawURL, billDate string) (*wechatBillAnswer, error) {
	resp, err := c.get(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, errs.Errorf("%w: the source could not be read: the answer broke off (WeChat Pay)", ErrNotReady)
	}
	verr := chanproto.VerifyWechatAnswer(resp.Header, body, c.platform, c.r.cfg.Now())
	if resp.StatusCode != http.StatusOK {
		var we wechatError
		_ = json.Unmarshal(body, &we)
		code := truncateName(we.Code)
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			return nil, errs.Errorf("%w: WeChat Pay refused the request's signature (HTTP 401 %s)", ErrFetch, code)
		case we.Code == "STATEMENT_CREATING":
			return nil, errs.Errorf("%w: WeChat Pay is still generating the bill (%s)", ErrNotReady, code)
		case we.Code == "NO_STATEMENT_EXIST" && c.r.cfg.Now().Before(wechatBillReady(billDate)):
			return nil, errs.Errorf("%w: WeChat Pay has no bill for %s yet (%s; bills are ready after 10:00 the next day)", ErrNotReady, billDate, code)
		case we.Code == "NO_STATEMENT_EXIST":
			return nil, errs.Errorf("%w: WeChat Pay has no bill for %s (%s)", ErrFetch, billDate, code)
		}
		return nil, httpStatusError("WeChat Pay "+code, resp.StatusCode)
	}
	if verr != nil {
		return nil, wechatRefusal(verr, resp.Header)
	}
	var a wechatBillAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, errs.Errorf("%w: WeChat Pay's bill answer is not the documented JSON", ErrFetch)
	}
	return &a, nil
}

// wechatBillReady is when a bill date's bill is ready: 10:00 Asia/Shanghai the next day.
func wechatBillReady(billDate string) time.Time {
	d, err := time.ParseInLocation(time.DateOnly, billDate, shanghai)
	if err != nil {
		return time.Time{}
	}
	return d.AddDate(0, 0, 1).Add(10 * time.Hour)
}

// wechatRefusal is the one line an operator is shown for an answer whose signature is refused.
func wechatRefusal(err error, h http.Header) error {
	serial := truncateName(h.Get(chanproto.HeaderWechatSerial))
	switch {
	case errors.Is(err, chanproto.ErrUnsigned):
		return errs.Errorf("%w: WeChat Pay's answer is not signed", ErrFetch)
	case errors.Is(err, chanproto.ErrWrongSerial):
		return errs.Errorf("%w: WeChat Pay's answer is signed by a key this account does not know (serial %s)", ErrFetch, serial)
	case errors.Is(err, chanproto.ErrClockSkew):
		return errs.Errorf("%w: WeChat Pay's answer is timestamped 5 minutes or more from this clock", ErrFetch)
	}
	return errs.Errorf("%w: WeChat Pay's answer signature does not verify (serial %s)", ErrFetch, serial)
}

// get makes a signed GET of rawURL (which must be on the allow-list).
func (c *wechatClient) get(ctx context.Context, rawURL string) (*http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, errs.Errorf("%w: WeChat Pay gave a URL that does not parse", ErrFetch)
	}
	what := u.Scheme + "://" + u.Host
	if err := c.r.sources.allowURL(u); err != nil {
		return nil, c.r.readError(what, err)
	}
	auth, err := chanproto.SignWechatRequest(c.key, c.mchID, c.serial, http.MethodGet, u.RequestURI(), nil, c.r.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("%w: sign: %v", ErrFetch, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "idemops-reconcile")
	resp, err := c.r.http.Do(req)
	if err != nil {
		return nil, c.r.readError(what, err)
	}
	return resp, nil
}

// download fetches one plain part and checks its SHA1 against the bill decompressed.
func (c *wechatClient) download(ctx context.Context, p wechatBillPart, deadline time.Time) (*Fetched, error) {
	if p.HashValue == "" || (p.HashType != "" && !strings.EqualFold(p.HashType, "SHA1")) {
		return nil, errs.Errorf("%w: WeChat Pay gave no SHA1 hash_value for part %d", ErrFetch, p.BillSequence)
	}
	resp, err := c.startDownload(ctx, p, deadline)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := c.r.spool(resp.Body, c.r.cfg.MaxBytes, "WeChat Pay bill download")
	if err != nil {
		return nil, err
	}
	u, err := Unpack(out.f, out.size, ArchiveLimits{MaxBytes: c.r.cfg.MaxBytes})
	if err == nil {
		h := sha1.New()
		_, err = io.Copy(h, u.Statement)
		u.Close()
		if err != nil && !errors.Is(err, ErrTooLarge) {
			err = errs.Errorf("%w: the downloaded bill does not decompress whole (%s: a truncated gzip?)", ErrFetch, errs.Verbatim(err.Error()))
		}
		if err == nil && !strings.EqualFold(hex.EncodeToString(h.Sum(nil)), p.HashValue) {
			err = errs.Errorf("%w: the downloaded bill's SHA1 is not the hash_value WeChat Pay gave (part %d)", ErrFetch, p.BillSequence)
		}
	}
	if err == nil {
		_, err = out.f.Seek(0, io.SeekStart)
	}
	if err != nil {
		out.close()
		return nil, refusal("WeChat Pay bill download", err)
	}
	return out, nil
}

// appendPart downloads one part of a split bill, checks its SHA1 (of the part as it came),
// opens it when encrypted, and appends it to w.
func (c *wechatClient) appendPart(ctx context.Context, p wechatBillPart, deadline time.Time, w io.Writer, size *int64) error {
	resp, err := c.startDownload(ctx, p, deadline)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	limit := c.r.cfg.MaxBytes - *size
	if p.EncryptKey != "" {
		limit = min(limit, maxEncryptedPart)
	}
	if p.HashValue == "" || (p.HashType != "" && !strings.EqualFold(p.HashType, "SHA1")) {
		return errs.Errorf("%w: WeChat Pay gave no SHA1 hash_value for part %d", ErrFetch, p.BillSequence)
	}
	h := sha1.New()
	part, err := c.r.spool(resp.Body, limit, fmt.Sprintf("WeChat Pay bill part %d", p.BillSequence), h)
	if err != nil {
		return err
	}
	defer part.close()
	if !strings.EqualFold(p.HashValue, hex.EncodeToString(h.Sum(nil))) {
		return errs.Errorf("%w: the downloaded bill's SHA1 is not the hash_value WeChat Pay gave (part %d)", ErrFetch, p.BillSequence)
	}
	if p.EncryptKey == "" {
		n, err := io.Copy(w, part.f)
		*size += n
		if err != nil {
			return fmt.Errorf("%w: %v", ErrFetch, err)
		}
		return nil
	}
	ciphertext, err := io.ReadAll(part.f)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFetch, err)
	}
	plain, err := chanproto.DecryptWechatBill(c.key, p.EncryptKey, p.Nonce, ciphertext)
	if err != nil {
		return errs.Errorf("%w: part %d of the encrypted bill does not decrypt (%s)", ErrFetch, p.BillSequence, errs.Verbatim(err.Error()))
	}
	n, err := w.Write(plain)
	*size += int64(n)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFetch, err)
	}
	return nil
}

// startDownload checks the URL is still within its life, then makes the signed GET.
func (c *wechatClient) startDownload(ctx context.Context, p wechatBillPart, deadline time.Time) (*http.Response, error) {
	if p.DownloadURL == "" {
		return nil, errs.Errorf("%w: WeChat Pay gave no download_url for part %d", ErrFetch, p.BillSequence)
	}
	if c.r.cfg.Now().After(deadline) {
		return nil, errs.Errorf("%w: the download_url of part %d expired before it could be fetched", ErrFetch, p.BillSequence)
	}
	resp, err := c.get(ctx, p.DownloadURL)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var we wechatError
		_ = json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&we)
		if resp.StatusCode == http.StatusUnauthorized {
			return nil, errs.Errorf("%w: WeChat Pay refused the download's signature (HTTP 401 %s)", ErrFetch, truncateName(we.Code))
		}
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden {
			return nil, errs.Errorf("%w: WeChat Pay refused the download of part %d: HTTP %d %s (an expired download_url?)", ErrFetch,
				p.BillSequence, resp.StatusCode, truncateName(we.Code))
		}
		return nil, httpStatusError("WeChat Pay bill download", resp.StatusCode)
	}
	return resp, nil
}
