package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemops/idemops/errs"
)

// Adyen: the settlement details report of a batch is a file downloaded from the customer
// area's report URL, {base}/MerchantAccount/{merchant account}/settlement_detail_report_batch_N.csv
// (https://docs.adyen.com/reporting/download-reports-automatically), authenticated with an API
// key (X-API-Key) or a report user's basic auth. The batch of a bill date comes from the
// account's batch_origin: daily batches numbered from a known one. A report not generated yet
// answers 404: "not ready".

type adyenFetcher struct{ r *Reconciler }

func (adyenFetcher) Name() string { return FetcherAdyen }

// AdyenBatch is the settlement batch of a bill date under origin (daily batches).
func AdyenBatch(origin BatchOrigin, billDate string) (int64, error) {
	o, err := time.Parse(time.DateOnly, origin.Date)
	if err != nil {
		return 0, err
	}
	d, err := time.Parse(time.DateOnly, billDate)
	if err != nil {
		return 0, err
	}
	n := origin.Batch + int64(d.Sub(o)/(24*time.Hour))
	if n < 0 {
		return 0, fmt.Errorf("%s is before batch 0", billDate)
	}
	return n, nil
}

func (f adyenFetcher) Fetch(ctx context.Context, req FetchRequest) (*Fetched, error) {
	r := f.r
	s := req.Account.Settings
	if s.BatchOrigin == nil {
		return nil, errs.Errorf("%w: the account has no batch_origin", ErrFetch)
	}
	batch, err := AdyenBatch(*s.BatchOrigin, req.BillDate)
	if err != nil {
		return nil, errs.Errorf("%w: no settlement batch for %s", ErrFetch, req.BillDate)
	}
	raw := fmt.Sprintf("%s/MerchantAccount/%s/settlement_detail_report_batch_%d.csv", s.apiBase(KindAdyen),
		url.PathEscape(s.MerchantAccount), batch)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, errs.Errorf("%w: the account's Adyen report base is not a URL", ErrFetch)
	}
	what := u.Scheme + "://" + u.Host
	if err := r.sources.allowURL(u); err != nil {
		return nil, r.readError(what, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	if s.Auth == "basic" {
		user, _, err := r.credential(ctx, req.Account.Channel, CredReportUser)
		if err != nil {
			return nil, err
		}
		pass, _, err := r.credential(ctx, req.Account.Channel, CredReportPassword)
		if err != nil {
			return nil, err
		}
		hreq.SetBasicAuth(strings.TrimSpace(string(user)), strings.TrimSpace(string(pass)))
	} else {
		key, _, err := r.credential(ctx, req.Account.Channel, CredAPIKey)
		if err != nil {
			return nil, err
		}
		hreq.Header.Set("X-API-Key", strings.TrimSpace(string(key)))
	}
	resp, err := r.http.Do(hreq)
	if err != nil {
		return nil, r.readError(what, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, errs.Errorf("%w: Adyen refused the account's credentials (HTTP %d)", ErrFetch, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound:
		return nil, errs.Errorf("%w: Adyen has no settlement details report for batch %d yet (HTTP 404)", ErrNotReady, batch)
	case resp.StatusCode != http.StatusOK:
		return nil, httpStatusError("Adyen report download", resp.StatusCode)
	}
	out, err := r.spool(resp.Body, r.cfg.MaxBytes, "Adyen report download")
	if err != nil {
		return nil, err
	}
	out.Note = fmt.Sprintf("settlement details, batch %d", batch)
	return out, nil
}
