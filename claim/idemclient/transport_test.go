package idemclient

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// scripted answers step i with steps[i] (the last one repeats): a status, replayed or not.
type step struct {
	status   int
	replayed bool
}

type seen struct{ method, key, body string }

func scriptedServer(t *testing.T, steps ...step) (*httptest.Server, func() []seen) {
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.Header.Get(HeaderKey), string(b)})
		s := steps[min(len(got)-1, len(steps)-1)]
		mu.Unlock()
		if s.status == http.StatusConflict || s.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "0")
		}
		if s.replayed {
			w.Header().Set(HeaderReplayed, "true")
		}
		w.WriteHeader(s.status)
		_, _ = w.Write([]byte("answer"))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen { mu.Lock(); defer mu.Unlock(); return append([]seen(nil), got...) }
}

func fastTransport() *Transport {
	return &Transport{BaseDelay: 1e6, MaxDelay: 5e6} // 1 ms, 5 ms
}

func TestTransport_RetriesWithOneKeyAndTheSameBody(t *testing.T) {
	for name, body := range map[string]func() io.Reader{
		"GetBody":    func() io.Reader { return strings.NewReader(`{"amount":1}`) },
		"no GetBody": func() io.Reader { return iotest.HalfReader(strings.NewReader(`{"amount":1}`)) },
	} {
		t.Run(name, func(t *testing.T) {
			srv, got := scriptedServer(t, step{503, false}, step{409, false}, step{500, false}, step{201, true})
			hc := &http.Client{Transport: fastTransport()}
			res, err := hc.Post(srv.URL, "application/json", body())
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			seen := got()
			if res.StatusCode != 201 || !Replayed(res) || string(b) != "answer" || len(seen) != 4 {
				t.Fatalf("status %d replayed %v attempts %d", res.StatusCode, Replayed(res), len(seen))
			}
			for _, s := range seen {
				if s.key == "" || s.key != seen[0].key || s.body != `{"amount":1}` {
					t.Fatalf("attempts differ: %+v", seen)
				}
			}
			if res.Request.Header.Get(HeaderKey) != seen[0].key {
				t.Fatal("the response does not tell the key it was sent with")
			}
		})
	}
}

func TestTransport_CallerKeyStopsOnOther4xxAndOnAReplay(t *testing.T) {
	for _, final := range []step{{422, false}, {400, false}, {500, true}} {
		srv, got := scriptedServer(t, final, step{201, false})
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("{}"))
		req.Header.Set(HeaderKey, "caller-key")
		res, err := (&http.Client{Transport: fastTransport()}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if seen := got(); res.StatusCode != final.status || len(seen) != 1 || seen[0].key != "caller-key" {
			t.Fatalf("%+v: status %d, attempts %+v", final, res.StatusCode, seen)
		}
	}
}

func TestTransport_AttemptsAreCappedAndSafeMethodsPassThrough(t *testing.T) {
	srv, got := scriptedServer(t, step{503, false})
	tr := fastTransport()
	tr.MaxAttempts = 3
	res, err := (&http.Client{Transport: tr}).Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil || res.StatusCode != 503 || len(got()) != 3 {
		t.Fatalf("err %v attempts %d", err, len(got()))
	}
	res.Body.Close()
	res, err = (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if seen := got(); len(seen) != 4 || seen[3].key != "" {
		t.Fatalf("GET: %+v", seen[3:])
	}
}
