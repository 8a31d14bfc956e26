package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

// queryParams are the names the console's pages and API read from the query string.
var queryParams = []string{"action", "actor", "after", "attention", "before", "bill_date", "channel", "cron_spec", "cursor",
	"digest", "field", "from", "job", "kind", "limit", "next", "notice", "operation", "run", "state", "target", "tenant",
	"time_zone", "to", "value"}

// FuzzConsoleQuery sends each query string to every GET route of the route table, as a `*`
// admin (pages by session, the API by token): whatever the query holds, the answer is never a
// 5xx. Plain `go test` runs the seeds (each parameter with hostile and odd values); `go test
// -fuzz FuzzConsoleQuery ./console/` explores further.
func FuzzConsoleQuery(f *testing.F) {
	// Each parameter once, with one of the odd values in turn (a few seconds in all).
	odd := []string{"%00", "%ff%fe", "x%c3%28", "-1", "99999999999999999999", "2024-13-45", "%27%3B--", "%5B%5D", "a%00b"}
	for i, name := range queryParams {
		f.Add(name + "=" + odd[i%len(odd)])
	}
	f.Add("tenant=acme&state=completed&field=currency&value=%22EUR%22&after=2024-01-01T00:00:00Z,1")
	f.Add("field=currency&value=%22%5Cu0000%22")
	f.Add("field=a.b&value=%7B%22x%22%3A%22%5Cud800%22%7D")
	f.Add("a=%zz&&=&" + strings.Repeat("x", 3000))

	db := pgtest.New(f)
	st, err := claim.NewStore(db, claim.Config{DigestSecret: testSecret})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := New(Config{DB: pgtest.Tenant(f, db), Claims: st, Argon2: cheapArgon})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	ctx := context.Background()
	root, err := srv.ops.Add(ctx, access.Change{Actor: "test"}, access.NewOperator{Name: "root", Password: "correct horse battery",
		Role: access.RoleAdmin, Tenants: []string{access.AllTenants}})
	if err != nil {
		f.Fatal(err)
	}
	cookie, err := srv.sessions.Create(ctx, root, "127.0.0.1", "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	token, err := srv.ops.CreateToken(ctx, access.Change{Actor: "test"}, "root", "fuzz", 0)
	if err != nil {
		f.Fatal(err)
	}
	var paths []string
	var api []bool
	for _, rt := range srv.routes() {
		if rt.Method != http.MethodGet {
			continue
		}
		p := rt.Path
		for _, param := range []string{":id", ":name", "*file"} {
			p = strings.Replace(p, param, map[string]string{":id": "1", ":name": "daily", "*file": "app.css"}[param], 1)
		}
		paths, api = append(paths, p), append(api, rt.Kind == kindAPI)
	}
	h := srv.Handler()

	f.Fuzz(func(t *testing.T, query string) {
		for i, p := range paths {
			req := httptest.NewRequest(http.MethodGet, p, nil)
			req.URL.RawQuery = query
			if api[i] {
				req.Header.Set("Authorization", "Bearer "+token)
			} else {
				req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("GET %s?%s: %d %.300s", p, query, rec.Code, rec.Body.String())
			}
		}
	})
}
