package demo_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

func (e *env) likeReq(method, path, body, tenantKey string) (int, map[string]any, http.Header) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.w.APIURL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tenantKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m, res.Header
}

// TestLikes_OnePerUserPerArticleSurvivesAPurgeAndUnlikeLikesAgain: the like's identity is the
// domain table's unique constraint, not a row in the keys table.
func TestLikes_OnePerUserPerArticleSurvivesAPurgeAndUnlikeLikesAgain(t *testing.T) {
	e := start(t, paysim.Config{Seed: 21})
	const path = "/v1/articles/a9/likes"
	s1, first, _ := e.likeReq("POST", path, `{"user_id": "u7"}`, e.key)
	s2, again, h := e.likeReq("POST", path, `{"user_id": "u7"}`, e.key)
	if s1 != 201 || s2 != 200 || h.Get("Idempotent-Replayed") != "true" || again["like_id"] != first["like_id"] {
		t.Fatalf("like %d %v, again %d %v", s1, first, s2, again)
	}
	pgtest.Exec(t, e.w.Orders.DB, `DELETE FROM idempotency_keys`) // any purge of the keys table
	if s, after, _ := e.likeReq("POST", path, `{"user_id": "u7"}`, e.key); s != 200 || after["like_id"] != first["like_id"] {
		t.Fatalf("like after a purge: %d %v, want the existing like", s, after)
	}
	if s, _, _ := e.likeReq("DELETE", path+"/u7", "", e.key); s != 204 {
		t.Fatalf("unlike: %d", s)
	}
	if s, fresh, _ := e.likeReq("POST", path, `{"user_id": "u7"}`, e.key); s != 201 || fresh["like_id"] == first["like_id"] {
		t.Fatalf("like after unlike: %d %v, want a new like", s, fresh)
	}
	if s, _, _ := e.likeReq("POST", path, `{"user_id": "u7"}`, e.w.APIKey("globex")); s != 201 {
		t.Fatalf("the same user and article in another tenant: %d, want its own like", s)
	}
	if s, _, _ := e.likeReq("POST", path, `{"user_id": "u\u0000"}`, e.key); s != 400 {
		t.Fatalf("NUL in user_id: %d, want 400", s)
	}
	var n int64
	e.w.Orders.DB.Raw(`SELECT count(*) FROM demo_likes`).Scan(&n)
	if n != 2 {
		t.Fatalf("%d like rows, want 2", n)
	}
}
