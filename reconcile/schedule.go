package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
)

// JobName is the daemon job name of reconciliation; its schedule params are JobParams.
const JobName = "reconcile"

// JobParams are the parameters of a "reconcile" schedule.
type JobParams struct {
	Job  string `json:"job"`            // the recon job's name
	Date string `json:"date,omitempty"` // bill date YYYY-MM-DD; empty: today minus the job's offset
}

// Job runs recon jobs for the daemon (daemon.Job). The integrator mirrors each recon job into
// the daemon's schedules as {name: "reconcile", params: {"job": NAME}, cron_spec, time_zone}.
type Job struct{ r *Reconciler }

// NewJob returns the daemon job that runs recon jobs with r.
func NewJob(r *Reconciler) *Job { return &Job{r: r} }

var _ daemon.Job = (*Job)(nil)

// Name implements daemon.Job.
func (j *Job) Name() string { return JobName }

// RunOnce implements daemon.Job: it runs the recon job named in params (a disabled job does
// nothing) and returns the lines loaded and the findings per kind.
func (j *Job) RunOnce(ctx context.Context, params []byte, p daemon.Progress) (daemon.Stats, error) {
	var jp JobParams
	if len(params) > 0 {
		if err := json.Unmarshal(params, &jp); err != nil {
			return nil, invalidf("params", "not a JSON object {\"job\": NAME, \"date\": YYYY-MM-DD}: %v", err)
		}
	}
	if jp.Job == "" {
		return nil, invalidf("params.job", "must name a recon job")
	}
	job, err := j.r.GetJob(ctx, jp.Job)
	if err != nil {
		return nil, err
	}
	if !job.Enabled {
		return daemon.Stats{}, nil
	}
	run, err := j.r.RunJob(ctx, job, jp.Date, "daemon", p)
	if run == nil {
		return nil, err
	}
	stats := daemon.Stats{"lines_loaded": run.RowsLoaded, "lines_matched": run.RowsMatched}
	for k, v := range run.Counts {
		stats[strings.ToLower(k)] = v
	}
	return stats, err
}

// RunJob runs one recon job for one bill date (empty: today in the job's zone minus its
// offset) on behalf of actor: it creates the run, fetches the statement — retrying "not ready
// yet" with backoff until the job's ready deadline, the run showing status waiting meanwhile —
// then imports and matches it. A statement still missing at the deadline fails the run with
// ErrNotReady. The run is returned with any error (nil only if it could not be created).
func (r *Reconciler) RunJob(ctx context.Context, job *ReconJob, billDate, actor string, p daemon.Progress) (*Run, error) {
	if p == nil {
		p = daemon.NopProgress{}
	}
	if billDate == "" {
		billDate = job.BillDate(r.cfg.Now())
	} else if _, err := time.Parse(time.DateOnly, billDate); err != nil {
		return nil, invalidf("date", "%q is not YYYY-MM-DD", billDate)
	}
	runID, err := r.StartRun(ctx, job, job.Channel, billDate, actor)
	if err != nil {
		return nil, err
	}
	deadline := r.cfg.Now().Add(time.Duration(job.ReadyDeadlineSeconds) * time.Second)
	backoff := r.cfg.RetryBackoff
	var src *fetched
	for attempt := 1; ; attempt++ {
		src, err = r.fetch(ctx, job.Source, billDate)
		if err == nil || !errors.Is(err, ErrNotReady) {
			break
		}
		if !r.cfg.Now().Add(backoff).Before(deadline) {
			err = errs.Errorf("%w after %d attempts until the deadline (%s): %s", ErrNotReady, attempt,
				time.Duration(job.ReadyDeadlineSeconds)*time.Second, errorPhrase(err))
			break
		}
		_ = r.setRunStatus(ctx, runID, RunWaiting, errs.Phrasef("attempt %d: %s; retrying in %s", attempt, errorPhrase(err), backoff))
		p.Report("waiting", int64(attempt), 0)
		select {
		case <-ctx.Done():
			return r.finishRun(ctx, runID, RunFailed, nil, fmt.Errorf("%w: cancelled while waiting: %v", ErrNotReady, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, r.cfg.RetryBackoffMax)
	}
	if err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	defer src.close()
	if err := r.setRunStatus(ctx, runID, RunRunning, errs.Phrase{}); err != nil {
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	req := RunRequest{Job: job, RunID: runID, Import: ImportRequest{Channel: job.Channel, Format: job.Format,
		BillDate: billDate, Location: job.Location(), Importer: actor, SHA256: src.sha, Size: src.size}}
	return r.ReconcilePacked(ctx, req, src.f, src.size, p)
}

// ExpandSource puts the bill date into a job's source pattern.
func ExpandSource(source, billDate string) string {
	return strings.NewReplacer("{date}", billDate, "{yyyymmdd}", strings.ReplaceAll(billDate, "-", "")).Replace(source)
}

// fetched is a statement ready to import: an open file (the source itself, or a temporary copy
// of an HTTP response) with its hash and size.
type fetched struct {
	f    *os.File
	sha  string
	size int64
	temp bool
}

func (f *fetched) close() {
	f.f.Close()
	if f.temp {
		os.Remove(f.f.Name())
	}
}

// fetch gets the statement for billDate. ErrNotReady: the file is missing, HTTP 404, or the
// channel answered 5xx/429 or not at all (worth retrying); ErrFetch: any other failure;
// ErrTooLarge: over MaxBytes.
func (r *Reconciler) fetch(ctx context.Context, source, billDate string) (*fetched, error) {
	loc := ExpandSource(source, billDate)
	if isHTTPSource(loc) {
		return r.fetchHTTP(ctx, loc)
	}
	st, err := os.Stat(loc)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errs.Errorf("%w: %s does not exist yet", ErrNotReady, loc)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	if st.Size() > r.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooLarge, loc, st.Size(), r.cfg.MaxBytes)
	}
	sha, size, err := HashFile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	f, err := os.Open(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	return &fetched{f: f, sha: sha, size: size}, nil
}

// fetchHTTP downloads the statement into a temporary file (hashing it on the way), so that the
// import reads a complete file and a known one is skipped unparsed.
func (r *Reconciler) fetchHTTP(ctx context.Context, u string) (*fetched, error) {
	return r.fetchHTTPOnce(ctx, u, false)
}

func (r *Reconciler) fetchHTTPOnce(ctx context.Context, u string, followed bool) (*fetched, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	resp, err := r.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrNotReady, redactURL(u), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && !followed {
		// A bill query (Alipay's alipay.data.dataservice.bill.downloadurl.query) answers the
		// URL of the bill, not the bill: follow it once.
		next, err := billDownloadURL(io.LimitReader(resp.Body, 64<<10))
		if errors.Is(err, ErrNotReady) {
			return nil, fmt.Errorf("GET %s: %w", redactURL(u), err)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: GET %s: %v", ErrFetch, redactURL(u), err)
		}
		return r.fetchHTTPOnce(ctx, next, true)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errs.Errorf("%w: GET %s: 404 Not Found", ErrNotReady, redactURL(u))
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, errs.Errorf("%w: GET %s: %s", ErrNotReady, redactURL(u), resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: GET %s: %s", ErrFetch, redactURL(u), resp.Status)
	case resp.ContentLength > r.cfg.MaxBytes:
		return nil, fmt.Errorf("%w: GET %s: %d bytes, the limit is %d", ErrTooLarge, redactURL(u), resp.ContentLength, r.cfg.MaxBytes)
	}
	tmp, err := os.CreateTemp(r.cfg.TempDir, "idemops-statement-*")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	out := &fetched{f: tmp, temp: true}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(resp.Body, r.cfg.MaxBytes+1))
	switch {
	case err != nil:
		out.close()
		return nil, fmt.Errorf("%w: GET %s: reading the body: %v", ErrNotReady, redactURL(u), err)
	case n > r.cfg.MaxBytes:
		out.close()
		return nil, fmt.Errorf("%w: GET %s: more than %d bytes", ErrTooLarge, redactURL(u), r.cfg.MaxBytes)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		out.close()
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	out.sha, out.size = hex.EncodeToString(h.Sum(nil)), n
	return out, nil
}

// billDownloadURL reads a bill query's JSON answer for its bill_download_url, at the top level
// or one object down (Alipay wraps it in alipay_data_dataservice_bill_downloadurl_query_response,
// with code 10000 for success).
func billDownloadURL(r io.Reader) (string, error) {
	var top map[string]json.RawMessage
	if err := json.NewDecoder(r).Decode(&top); err != nil {
		return "", fmt.Errorf("the JSON answer does not read: %v", err)
	}
	objects := []map[string]json.RawMessage{top}
	for _, v := range top {
		var inner map[string]json.RawMessage
		if json.Unmarshal(v, &inner) == nil {
			objects = append(objects, inner)
		}
	}
	for _, o := range objects {
		var u, code, subCode, msg string
		_ = json.Unmarshal(o["bill_download_url"], &u)
		_ = json.Unmarshal(o["code"], &code)
		_ = json.Unmarshal(o["sub_code"], &subCode)
		_ = json.Unmarshal(o["sub_msg"], &msg)
		if subCode == "isp.bill_not_exist" { // the day's bill is not generated yet
			return "", fmt.Errorf("%w: the bill query answered %s: %s", ErrNotReady, subCode, msg)
		}
		if code != "" && code != "10000" {
			return "", fmt.Errorf("the bill query answered code %s %s: %s", code, subCode, msg)
		}
		if u != "" {
			if !isHTTPSource(u) {
				return "", fmt.Errorf("bill_download_url %q is not http(s)", redactURL(u))
			}
			return u, nil
		}
	}
	return "", errors.New("the JSON answer has no bill_download_url")
}

// redactURL drops the query (it may carry a token) from URLs in errors and logs.
func redactURL(u string) string {
	base, _, _ := strings.Cut(u, "?")
	return base
}
