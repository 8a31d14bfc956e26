package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemops/idemops/chanproto"
	"github.com/idemops/idemops/errs"
)

// Alipay (alipay.data.dataservice.bill.downloadurl.query,
// https://opendocs.alipay.com/apis/api_15/alipay.data.dataservice.bill.downloadurl.query): the
// gateway call is signed RSA2 with the application's private key over its sorted parameters
// (chanproto.SignAlipayRequest); the answer's signature over its
// alipay_data_dataservice_bill_downloadurl_query_response member must verify with Alipay's
// public key. It answers bill_download_url, a zip of GBK CSVs (业务明细 and its 汇总) that must
// be fetched within 30 seconds of the answer; isp.bill_not_exist is "not ready".

type alipayFetcher struct{ r *Reconciler }

func (alipayFetcher) Name() string { return FetcherAlipay }

const (
	alipayBillMethod = "alipay.data.dataservice.bill.downloadurl.query"
	// alipayURLLife is how long a bill_download_url lives: "获取连接后30秒后未下载，链接地址失效".
	alipayURLLife = 30 * time.Second
)

// alipayBillAnswer is the answer member's fields.
type alipayBillAnswer struct {
	Code            string `json:"code"`
	Msg             string `json:"msg"`
	SubCode         string `json:"sub_code"`
	SubMsg          string `json:"sub_msg"`
	BillDownloadURL string `json:"bill_download_url"`
}

func (f alipayFetcher) Fetch(ctx context.Context, req FetchRequest) (*Fetched, error) {
	r := f.r
	s := req.Account.Settings
	key, _, err := r.privateKey(ctx, req.Account.Channel, CredAppPrivateKey)
	if err != nil {
		return nil, err
	}
	alipayKey, err := chanproto.ParsePublicKey([]byte(s.AlipayPublicKey), "")
	if err != nil {
		return nil, errs.Errorf("%w: the account's alipay_public_key does not parse", ErrFetch)
	}
	bill := req.Job.Bill
	if bill == "" {
		bill = "trade"
	}
	biz, _ := json.Marshal(map[string]string{"bill_type": bill, "bill_date": req.BillDate})
	params := url.Values{"app_id": {s.AppID}, "method": {alipayBillMethod}, "format": {"JSON"}, "charset": {"utf-8"},
		"sign_type": {"RSA2"}, "timestamp": {r.cfg.Now().In(shanghai).Format(time.DateTime)}, "version": {"1.0"},
		"biz_content": {string(biz)}}
	if err := chanproto.SignAlipayRequest(key, params); err != nil {
		return nil, fmt.Errorf("%w: sign: %v", ErrFetch, err)
	}
	gateway := s.apiBase(KindAlipay)
	answered := r.cfg.Now()
	a, err := f.call(ctx, gateway, params, &alipayKey)
	if err != nil {
		return nil, err
	}
	switch {
	case a.SubCode == "isp.bill_not_exist":
		return nil, errs.Errorf("%w: Alipay has no bill for %s yet (%s)", ErrNotReady, req.BillDate, truncateName(a.SubCode))
	case a.Code != "10000":
		return nil, errs.Errorf("%w: Alipay refused the bill query: %s %s", ErrFetch, truncateName(a.Code), truncateName(a.SubCode))
	case a.BillDownloadURL == "":
		return nil, errs.Errorf("%w: Alipay's answer has no bill_download_url", ErrFetch)
	}
	out, err := f.download(ctx, a.BillDownloadURL, answered.Add(alipayURLLife))
	if err != nil {
		return nil, err
	}
	out.Note = bill + " zip, answer signature verified"
	return out, nil
}

// call posts the signed gateway request and reads and verifies its answer.
func (f alipayFetcher) call(ctx context.Context, gateway string, params url.Values, key *chanproto.PublicKey) (*alipayBillAnswer, error) {
	r := f.r
	u, err := url.Parse(gateway)
	if err != nil || u.Host == "" {
		return nil, errs.Errorf("%w: the account's Alipay gateway is not a URL", ErrFetch)
	}
	what := u.Scheme + "://" + u.Host
	if err := r.sources.allowURL(u); err != nil {
		return nil, r.readError(what, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway, strings.NewReader(params.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded;charset=utf-8")
	resp, err := r.http.Do(hreq)
	if err != nil {
		return nil, r.readError(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, httpStatusError("Alipay gateway", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, errs.Errorf("%w: the source could not be read: the answer broke off (Alipay gateway)", ErrNotReady)
	}
	answer, err := chanproto.ParseAlipayAnswer(body, alipayBillMethod)
	if err != nil {
		return nil, errs.Errorf("%w: Alipay's answer is not a gateway answer", ErrFetch)
	}
	var a alipayBillAnswer
	if err := json.Unmarshal(answer.Content, &a); err != nil {
		return nil, errs.Errorf("%w: Alipay's answer is not a gateway answer", ErrFetch)
	}
	if answer.Member == "error_response" && answer.Sign == "" {
		// The gateway refuses a request it cannot authenticate without signing its refusal;
		// such an answer is only ever a refusal, never a statement.
		return nil, alipayRefusal(a)
	}
	if err := answer.Verify(key.Key); err != nil {
		if errors.Is(err, chanproto.ErrUnsigned) {
			return nil, errs.Errorf("%w: Alipay's answer is not signed", ErrFetch)
		}
		return nil, errs.Errorf("%w: Alipay's answer signature does not verify with the account's alipay_public_key", ErrFetch)
	}
	if answer.Member == "error_response" {
		return nil, alipayRefusal(a)
	}
	return &a, nil
}

func alipayRefusal(a alipayBillAnswer) error {
	switch {
	case strings.HasPrefix(a.SubCode, "isv.invalid-signature") || strings.HasPrefix(a.SubCode, "isv.missing-signature"):
		return errs.Errorf("%w: Alipay refused the request's signature (%s %s)", ErrFetch, truncateName(a.Code), truncateName(a.SubCode))
	case a.SubCode == "isv.invalid-timestamp":
		// The request's timestamp is this machine's clock: say where to look.
		return errs.Errorf("%w: Alipay refused the request's timestamp (%s %s): this machine's clock may be off",
			ErrFetch, truncateName(a.Code), truncateName(a.SubCode))
	}
	return errs.Errorf("%w: Alipay refused the bill query: %s %s", ErrFetch, truncateName(a.Code), truncateName(a.SubCode))
}

// download fetches the bill zip from bill_download_url before it expires.
func (f alipayFetcher) download(ctx context.Context, raw string, deadline time.Time) (*Fetched, error) {
	r := f.r
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, errs.Errorf("%w: Alipay's bill_download_url does not parse", ErrFetch)
	}
	what := u.Scheme + "://" + u.Host
	if err := r.sources.allowURL(u); err != nil {
		return nil, r.readError(what, err)
	}
	if r.cfg.Now().After(deadline) {
		return nil, errs.Errorf("%w: Alipay's bill_download_url expired before it could be fetched", ErrFetch)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	resp, err := r.http.Do(hreq)
	if err != nil {
		return nil, r.readError(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			return nil, errs.Errorf("%w: Alipay refused the bill download: HTTP %d (an expired bill_download_url?)", ErrFetch, resp.StatusCode)
		}
		return nil, httpStatusError("Alipay bill download", resp.StatusCode)
	}
	out, err := r.spool(resp.Body, r.cfg.MaxBytes, "Alipay bill download")
	if err != nil {
		return nil, err
	}
	head := make([]byte, 4)
	if n, _ := out.f.ReadAt(head, 0); n < 4 || !bytes.Equal(head, zipMagic) {
		out.close()
		return nil, errs.Errorf("%w: Alipay's bill download is not a zip", ErrFetch)
	}
	return out, nil
}
