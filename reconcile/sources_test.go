package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 35 item 1: statement sources are on an allow-list, checked when a job is saved and again
// at every fetch, after every redirect and for every followed download URL, against the address
// actually connected to.

func TestSourcePolicy_OriginsAndNumericHosts(t *testing.T) {
	t.Parallel()
	p, err := newSourcePolicy(SourcePolicy{Allow: []string{"http://127.0.0.1:8090", "https://paysim.internal:8443"}})
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"http://127.0.0.1:8090/statements/x", "https://api.mch.weixin.qq.com/v3/bill/tradebill",
		"https://API.MCH.WEIXIN.QQ.COM:443/x", "https://paysim.internal:8443/", "http://dwbillcenter.alipay.com/downloadBillFile.resource"}
	refused := []string{"http://127.0.0.1:5432/", "http://127.0.0.1/", "https://127.0.0.1:8090/", "http://169.254.169.254/latest/meta-data/",
		"http://2130706433:8090/", "http://0x7f000001:8090/", "http://0177.0.0.1:8090/", "http://127.1:8090/",
		"http://[::ffff:127.0.0.1]:8090/", "http://[::ffff:7f00:1]:8090/", "http://localhost:8090/", "http://api.mch.weixin.qq.com/",
		"ftp://api.mch.weixin.qq.com/", "https://evil.com@api.mch.weixin.qq.com.evil.com/"}
	for _, raw := range allowed {
		u, _ := url.Parse(raw)
		if err := p.allowURL(u); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
	for _, raw := range refused {
		u, _ := url.Parse(raw)
		if err := p.allowURL(u); !errors.Is(err, ErrSourceRefused) {
			t.Errorf("%s: %v; want refused", raw, err)
		}
	}
	for _, bad := range []string{"http://2130706433:80", "http://x/path", "http://user:pw@x:80", "file:///etc"} {
		if _, err := newSourcePolicy(SourcePolicy{Allow: []string{bad}}); err == nil {
			t.Errorf("allow-list entry %q accepted", bad)
		}
	}
}

// A name on the allow-list that resolves to a loopback, private, link-local or metadata
// address is refused at the connection (DNS rebinding): only an origin whose host is the
// address itself may reach such an address.
func TestSourcePolicy_TheResolvedAddressIsChecked(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "bill") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	p, err := newSourcePolicy(SourcePolicy{Allow: []string{"http://bills.example.com:" + port, srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.0.1", "::1", "0.0.0.0", "100.64.0.1", "fe80::1"} {
		p.lookup = func(context.Context, string) ([]net.IPAddr, error) { return []net.IPAddr{{IP: net.ParseIP(addr)}}, nil }
		c := p.client(5*time.Second, nil)
		resp, err := c.Get("http://bills.example.com:" + port + "/x")
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, ErrSourceRefused) || !strings.Contains(err.Error(), "resolves to a") {
			t.Errorf("a name resolving to %s: %v; want refused", addr, err)
		}
	}
	// The literal address on the list is reached.
	resp, err := p.client(5*time.Second, nil).Get(srv.URL + "/x")
	if err != nil {
		t.Fatalf("the listed address: %v", err)
	}
	resp.Body.Close()
}

func TestSourcePolicy_FileRoot(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link.csv"))
	p, err := newSourcePolicy(SourcePolicy{FileRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.filePath(filepath.Join(root, "bills", "2024.csv")); err != nil {
		t.Errorf("a path under the root: %v", err)
	}
	for _, bad := range []string{filepath.Join(root, "..", "x"), "/etc/passwd", "relative/x.csv", filepath.Join(root, "link.csv")} {
		if _, err := p.filePath(bad); !errors.Is(err, ErrSourceRefused) {
			t.Errorf("%s: %v; want refused", bad, err)
		}
	}
	none, _ := newSourcePolicy(SourcePolicy{})
	if _, err := none.filePath(filepath.Join(root, "x.csv")); !errors.Is(err, ErrSourceRefused) || !strings.Contains(err.Error(), "--recon-file-root") {
		t.Errorf("without a root: %v", err)
	}
}

// testReconciler is a Reconciler without a database, for fetchers that need none.
func testReconciler(t *testing.T, sp SourcePolicy) *Reconciler {
	t.Helper()
	r, err := New(nil, Config{Sources: sp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FetchTimeout: 5 * time.Second,
		TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// At fetch time: every redirect and every followed bill_download_url must be on the list, and
// what an operator is shown is a generic line — never a dial error naming addresses and ports.
func TestURLFetcher_RedirectsAndDownloadURLsAreCheckedErrorsAreGeneric(t *testing.T) {
	t.Parallel()
	var offListHits atomic.Int64
	offList := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offListHits.Add(1)
		io.WriteString(w, "secret")
	}))
	defer offList.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close() // nothing listens there now
	listed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, offList.URL+"/x", http.StatusFound)
		case "/query":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"r":{"code":"10000","bill_download_url":"`+offList.URL+`/bill.zip"}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer listed.Close()
	r := testReconciler(t, SourcePolicy{Allow: []string{listed.URL, closedURL}})
	fetch := func(src string) error {
		_, err := urlFetcher{r}.Fetch(context.Background(), FetchRequest{Job: &ReconJob{JobSpec: JobSpec{Source: src}}, BillDate: "2024-03-01"})
		return err
	}
	for _, c := range []struct{ src, want string }{
		{listed.URL + "/redirect?d={date}", "the source could not be read: refused"},
		{listed.URL + "/query?d={date}", "the source could not be read: refused"},
		{listed.URL + "/missing/{date}", "the source could not be read: HTTP 404"},
		{closedURL + "/{date}", "the source could not be read: unreachable (" + closedURL + ")"},
		{offList.URL + "/{date}", "the source could not be read: refused"},
	} {
		err := fetch(c.src)
		t.Logf("%s: %v", c.src, err)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.src, err, c.want)
			continue
		}
		for _, leak := range []string{"dial", "connection refused", "connect:", "EOF"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: %q shows a raw network error", c.src, err)
			}
		}
	}
	if offListHits.Load() != 0 {
		t.Errorf("the origin off the list was reached %d times", offListHits.Load())
	}
}
