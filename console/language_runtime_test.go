package console

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/internal/testinfra/pagecheck"
)

// hasHan reports whether s holds a Chinese character.
func hasHan(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.Is(unicode.Han, r) }) >= 0
}

// Errors made at run time reach a Chinese page in Chinese, naming the field, the statement line
// or the moment, while the same request through the JSON API stays English: a malformed
// statement upload, a key search with a bad state, a replay preview refused for a parked key.
func TestLanguage_RuntimeErrorsInChineseOnPagesEnglishInTheAPI(t *testing.T) {
	b := setup(t)
	b.addOperator("o", access.RoleOperator, "*")
	b.addOperator("e", access.RoleOperator, "*")
	tok := b.token("o")
	c := b.signIn("o")
	if r := c.post("/settings/language", url.Values{"lang": {"zh-CN"}}, true); r.Status != 303 {
		t.Fatalf("switch to zh-CN: %d", r.Status)
	}

	bad, err := os.ReadFile("../reconcile/testdata/stripe/bad_gross.csv")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{"channel": "stripe", "format": "stripe", "csrf": c.csrf}
	page := c.upload("/reconcile/upload", fields, bad)
	if page.Status != 422 {
		t.Fatalf("malformed upload page: %d", page.Status)
	}
	// The alert says it in Chinese, and so does the run's page later: the run kept the error's
	// phrase beside its English text.
	const zhLine = `第 3 行：gross：金额 &#34;5000.5&#34; 的小数超过 0 位`
	mustContain(t, "zh-CN upload error", page.Body, `<html lang="zh-CN">`, `<p class="error" role="alert" id="run-error">`+zhLine+`</p>`)
	mustNotContain(t, "zh-CN upload error", page.Body, "line 3: gross")
	var runID int64
	if err := b.db.Raw(`SELECT max(id) FROM recon_runs`).Scan(&runID).Error; err != nil {
		t.Fatal(err)
	}
	mustContain(t, "zh-CN failed run page", c.get(fmt.Sprintf("/reconcile/runs/%d", runID)).Body, `第 3 行：gross：金额 "5000.5" 的小数超过 0 位`)
	mustContain(t, "en failed run page", b.signIn("e").getLang(fmt.Sprintf("/reconcile/runs/%d", runID), "").Body, `line 3: gross: amount "5000.5" has more than 0 decimals`)
	api := c.uploadAPI("/api/v1/reconcile/statements", tok, map[string]string{"channel": "stripe", "format": "stripe"}, bad)
	if api.Status != 422 || !strings.Contains(api.Body, `"line 3: gross: `) || hasHan(api.Body) {
		t.Errorf("malformed upload through the API: %d %s, want 422 in English naming line 3", api.Status, api.Body)
	}

	page = c.get("/keys?state=bogus")
	mustContain(t, "zh-CN key search error", page.Body, "state：&#34;bogus&#34; 不是幂等键状态")
	mustNotContain(t, "zh-CN key search error", page.Body, "is not a key state")
	api = c.api("/api/v1/keys?state=bogus", tok)
	if api.Status != 400 || !strings.Contains(api.Body, `state: \"bogus\" is not a key state`) || hasHan(api.Body) {
		t.Errorf("bad state through the API: %d %s, want 400 in English", api.Status, api.Body)
	}

	// A recon job's next runs are written the Chinese way, in the operator's zone (UTC here:
	// 06:00 in Shanghai is 22:00 UTC); a bad zone is named in Chinese.
	page = c.get("/reconcile/next-runs?cron_spec=0+6+*+*+*&time_zone=Asia/Shanghai")
	if !regexp.MustCompile(`<li><time [^>]*>\d{4}年\d{1,2}月\d{1,2}日 22:00:00 UTC</time>`).MatchString(page.Body) {
		t.Errorf("zh-CN next runs: %s", page.Body)
	}
	page = c.get("/reconcile/next-runs?cron_spec=0+6+*+*+*&time_zone=Mars/Base")
	mustContain(t, "zh-CN bad zone", page.Body, "无效：time_zone：&#34;Mars/Base&#34;：未知")

	parked := b.seedKey("acme", "payment.charge", "parked-zh", `{"amount":100,"currency":"USD"}`, false)
	b.exec(`UPDATE idempotency_keys SET lease_owner = NULL, lease_token = NULL, not_found_at = now(),
		lease_expires_at = now() + interval '30 seconds' WHERE id = ?`, parked.ID)
	page = c.get(fmt.Sprintf("/keys/%d/replay", parked.ID))
	mustContain(t, "zh-CN refused preview", page.Body, "该幂等键被搁置到", "隔离期尚未结束")
	if !regexp.MustCompile(`被搁置到 \d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d:\d\d UTC`).MatchString(pagecheck.Text(page.Body)) {
		t.Error("zh-CN refused preview does not write the parking time the Chinese way")
	}
	mustNotContain(t, "zh-CN refused preview", page.Body, "parked until")
	p := decode[apiPreview](t, c.api(fmt.Sprintf("/api/v1/keys/%d/replay", parked.ID), tok))
	if !regexp.MustCompile(`^the key is parked until \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ: downstream said not found`).MatchString(p.Text) {
		t.Errorf("API preview text = %q, want the English refusal", p.Text)
	}
}
