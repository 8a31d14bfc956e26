package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/idemops/idemops/errs"
)

// A recon job's statement comes through a fetcher, chosen by the job's channel account's kind:
// the channels' own APIs (WeChat Pay APIv3, Alipay, Stripe, Adyen) sign, authenticate and
// verify as each channel does; a generic account's job fetches its source, a URL template or a
// file path. Every fetcher hands over verified bytes in a file, and nothing is imported from an
// answer that was refused.

// Fetcher names, as the job API and page show them.
const (
	FetcherWechatPay = "wechatpay_v3"
	FetcherAlipay    = "alipay"
	FetcherStripe    = "stripe"
	FetcherAdyen     = "adyen"
	FetcherURL       = "url"
	FetcherFile      = "file"
)

// Fetcher gets one bill date's statement of one channel account.
type Fetcher interface {
	// Name is the fetcher's name (FetcherWechatPay, …, FetcherURL, FetcherFile).
	Name() string
	// Fetch gets the statement of req's bill date, verified as the channel's protocol says.
	// Errors: ErrNotReady (the channel has not published it yet, or could not be reached:
	// retried until the job's ready deadline), ErrFetch (the source could not be read, or its
	// answer was refused — a bad signature, a hash that does not match, an expired URL; one
	// line saying which), ErrTooLarge, ErrSealed (a credential that does not open).
	Fetch(ctx context.Context, req FetchRequest) (*Fetched, error)
}

// FetchRequest is one fetch: the job, its channel account and the bill date.
type FetchRequest struct {
	Job      *ReconJob
	Account  *ChannelAccount
	BillDate string
}

// Fetched is a statement ready to import: an open file (the source itself, or a temporary file
// the fetcher wrote) with its SHA-256 and size; packed files (gzip, zip) are unpacked by the
// import. Note says how it came, for the run's log line ("tradebill ALL, 2 parts, SHA1 checked").
type Fetched struct {
	f    *os.File
	sha  string
	size int64
	temp bool
	Note string
}

func (f *Fetched) close() {
	f.f.Close()
	if f.temp {
		os.Remove(f.f.Name())
	}
}

// fetcherFor chooses the fetcher of a job: its account's kind, or for a generic account the
// URL or file fetcher by the source's form.
func (r *Reconciler) fetcherFor(job *ReconJob, account *ChannelAccount) Fetcher {
	switch account.Kind {
	case KindWechatPay:
		return wechatFetcher{r}
	case KindAlipay:
		return alipayFetcher{r}
	case KindStripe:
		return stripeFetcher{r}
	case KindAdyen:
		return adyenFetcher{r}
	}
	if isHTTPSource(job.Source) {
		return urlFetcher{r}
	}
	return fileFetcher{r}
}

// FetcherName is the name of the fetcher a job of an account of kind uses.
func FetcherName(kind, source string) string {
	switch kind {
	case KindWechatPay, KindAlipay, KindStripe, KindAdyen:
		return kind
	}
	if isHTTPSource(source) {
		return FetcherURL
	}
	return FetcherFile
}

// tempFile is a new temporary file for a fetched statement.
func (r *Reconciler) tempFile() (*os.File, error) {
	f, err := os.CreateTemp(r.cfg.TempDir, "idemops-statement-*")
	if err != nil {
		return nil, fmt.Errorf("%w: temporary file: %v", ErrFetch, err)
	}
	return f, nil
}

// spool copies an answer's body into a new temporary file, at most limit bytes, hashing it with
// SHA-256 and any extra hashes on the way. The file is returned rewound.
func (r *Reconciler) spool(body io.Reader, limit int64, what string, extra ...hash.Hash) (*Fetched, error) {
	tmp, err := r.tempFile()
	if err != nil {
		return nil, err
	}
	out := &Fetched{f: tmp, temp: true}
	h := sha256.New()
	writers := []io.Writer{tmp, h}
	for _, x := range extra {
		writers = append(writers, x)
	}
	n, err := io.Copy(io.MultiWriter(writers...), io.LimitReader(body, limit+1))
	switch {
	case err != nil:
		out.close()
		return nil, errs.Errorf("%w: the source could not be read: the answer broke off (%s)", ErrNotReady, what)
	case n > limit:
		out.close()
		return nil, fmt.Errorf("%w: %s: more than %d bytes", ErrTooLarge, what, limit)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		out.close()
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	out.sha, out.size = hex.EncodeToString(h.Sum(nil)), n
	return out, nil
}

// writeTemp writes a statement the fetcher made (Stripe's rows) into a temporary file, hashing
// it on the way; the file is returned rewound.
func (r *Reconciler) writeTemp(write func(io.Writer) error) (*Fetched, error) {
	tmp, err := r.tempFile()
	if err != nil {
		return nil, err
	}
	out := &Fetched{f: tmp, temp: true}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(tmp, h)}
	if err := write(cw); err != nil {
		out.close()
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	if cw.n > r.cfg.MaxBytes {
		out.close()
		return nil, fmt.Errorf("%w: the statement is more than %d bytes", ErrTooLarge, r.cfg.MaxBytes)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		out.close()
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	out.sha, out.size = hex.EncodeToString(h.Sum(nil)), cw.n
	return out, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// httpStatusError is the line an operator is shown for an HTTP answer that is not the
// statement: 404, 429 and 5xx are "not ready" (retried), any other status a failure.
func httpStatusError(what string, status int) error {
	switch {
	case status == http.StatusNotFound:
		return errs.Errorf("%w: the source could not be read: HTTP %d (%s)", ErrNotReady, status, what)
	case status == http.StatusTooManyRequests || status >= 500:
		return errs.Errorf("%w: the source could not be read: HTTP %d (%s)", ErrNotReady, status, what)
	}
	return errs.Errorf("%w: the source could not be read: HTTP %d (%s)", ErrFetch, status, what)
}

// originOf is a URL's scheme://host, the part of a URL an error may name.
func originOf(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "the source"
	}
	return p.Scheme + "://" + p.Host
}

// urlFetcher GETs a generic job's source: a URL template with {date}, following a JSON bill
// query's bill_download_url once (both on the allow-list).
type urlFetcher struct{ r *Reconciler }

func (urlFetcher) Name() string { return FetcherURL }

func (f urlFetcher) Fetch(ctx context.Context, req FetchRequest) (*Fetched, error) {
	u, err := f.r.jobSourceURL(req.Job, req.BillDate)
	if err != nil {
		return nil, err
	}
	return f.get(ctx, u, false)
}

func (f urlFetcher) get(ctx context.Context, u string, followed bool) (*Fetched, error) {
	r := f.r
	what := originOf(u)
	parsed, err := url.Parse(u)
	if err != nil {
		return nil, errs.Errorf("%w: the source could not be read: not a URL (%s)", ErrFetch, what)
	}
	if err := r.sources.allowURL(parsed); err != nil {
		return nil, r.readError(what, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, errs.Errorf("%w: the source could not be read: not a URL (%s)", ErrFetch, what)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, r.readError(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && !followed {
		// A bill query (Alipay's alipay.data.dataservice.bill.downloadurl.query) answers the
		// URL of the bill, not the bill: follow it once.
		next, err := billDownloadURL(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return nil, errs.Errorf("%w (%s)", err, what)
		}
		return f.get(ctx, next, true)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, httpStatusError(what, resp.StatusCode)
	}
	if resp.ContentLength > r.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, the limit is %d", ErrTooLarge, what, resp.ContentLength, r.cfg.MaxBytes)
	}
	return r.spool(resp.Body, r.cfg.MaxBytes, what)
}

// billDownloadURL reads a bill query's JSON answer for its bill_download_url, at the top level
// or one object down (Alipay wraps it in alipay_data_dataservice_bill_downloadurl_query_response,
// with code 10000 for success). Errors: ErrNotReady (isp.bill_not_exist), ErrFetch.
func billDownloadURL(r io.Reader) (string, error) {
	var top map[string]json.RawMessage
	if err := json.NewDecoder(r).Decode(&top); err != nil {
		return "", errs.Errorf("%w: the JSON answer does not read", ErrFetch)
	}
	objects := []map[string]json.RawMessage{top}
	for _, v := range top {
		var inner map[string]json.RawMessage
		if json.Unmarshal(v, &inner) == nil {
			objects = append(objects, inner)
		}
	}
	for _, o := range objects {
		var u, code, subCode string
		_ = json.Unmarshal(o["bill_download_url"], &u)
		_ = json.Unmarshal(o["code"], &code)
		_ = json.Unmarshal(o["sub_code"], &subCode)
		if subCode == "isp.bill_not_exist" { // the day's bill is not generated yet
			return "", errs.Errorf("%w: the bill query answered %s", ErrNotReady, truncateName(subCode))
		}
		if code != "" && code != "10000" {
			return "", errs.Errorf("%w: the bill query answered code %s %s", ErrFetch, truncateName(code), truncateName(subCode))
		}
		if u != "" {
			if !isHTTPSource(u) {
				return "", errs.Errorf("%w: the bill query's bill_download_url is not http(s)", ErrFetch)
			}
			return u, nil
		}
	}
	return "", errs.Errorf("%w: the JSON answer has no bill_download_url", ErrFetch)
}

// fileFetcher reads a generic job's source as a file path under the file root.
type fileFetcher struct{ r *Reconciler }

func (fileFetcher) Name() string { return FetcherFile }

func (f fileFetcher) Fetch(_ context.Context, req FetchRequest) (*Fetched, error) {
	r := f.r
	loc := ExpandSource(req.Job.Source, req.BillDate)
	path, err := r.sources.filePath(loc)
	if err != nil {
		return nil, errs.Errorf("%w: the source could not be read: refused (%s)", ErrFetch, phraseOf(err))
	}
	st, err := os.Stat(path)
	if isNotExist(err) {
		return nil, errs.Errorf("%w: %s does not exist yet", ErrNotReady, path)
	}
	if err != nil {
		return nil, r.readError(path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, errs.Errorf("%w: the source could not be read: not a regular file (%s)", ErrFetch, path)
	}
	if st.Size() > r.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooLarge, path, st.Size(), r.cfg.MaxBytes)
	}
	sha, size, err := HashFile(path)
	if err != nil {
		return nil, r.readError(path, err)
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, r.readError(path, err)
	}
	return &Fetched{f: file, sha: sha, size: size}, nil
}

// refusal keeps a fetch error that already says what happened, and makes any other a one-line
// ErrFetch naming what was refused.
func refusal(what string, err error) error {
	if errors.Is(err, ErrNotReady) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrFetch) {
		return err
	}
	return errs.Errorf("%w: %s: %s", ErrFetch, what, phraseOf(err))
}
