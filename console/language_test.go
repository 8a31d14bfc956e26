package console

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
)

func (c *client) getLang(path, acceptLanguage string) resp {
	req, _ := http.NewRequest("GET", c.b.ts.URL+path, nil)
	if acceptLanguage != "" {
		req.Header.Set("Accept-Language", acceptLanguage)
	}
	return c.do(req)
}

// A page asked for with Accept-Language: zh-CN is in Chinese and says so in <html lang>;
// without the header (or with en) the same page is English. Money and channel names follow.
func TestLanguage_AcceptLanguageChoosesChinese(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	k := b.seedKey("acme", "payment.charge", "lang-1", `{"amount":123456,"currency":"CNY"}`, true)
	c := b.signIn("a")
	page := "/keys/" + strconv.FormatInt(k.ID, 10)

	r := c.getLang(page, "zh-CN,zh;q=0.9,en;q=0.8")
	if r.Status != 200 {
		t.Fatalf("key page in zh-CN: %d", r.Status)
	}
	mustContain(t, "zh-CN key page", r.Body, `<html lang="zh-CN">`, "幂等键", "仪表盘", "退出登录", "保留策略")
	mustNotContain(t, "zh-CN key page", r.Body, ">Sign out<", ">Dashboard<")
	if !regexp.MustCompile(`\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d:\d\d UTC`).MatchString(r.Body) {
		t.Fatal("zh-CN key page does not write its dates the Chinese way")
	}

	r = c.getLang(page, "")
	mustContain(t, "default key page", r.Body, `<html lang="en">`, ">Dashboard<", ">Sign out<")
	mustNotContain(t, "default key page", r.Body, "仪表盘")
	r = c.getLang(page, "fr-FR, en;q=0.5")
	mustContain(t, "fr key page", r.Body, `<html lang="en">`)

	// Error pages and the sign-in page speak the header's language too.
	r = c.getLang("/no-such-page", "zh-CN")
	mustContain(t, "zh-CN 404", r.Body, `<html lang="zh-CN">`, "未找到", "返回仪表盘")
	r = b.client().getLang("/login", "zh-CN")
	mustContain(t, "zh-CN sign-in", r.Body, `<html lang="zh-CN">`, "登录", "密码", `action="/login/language"`)
}

// The language saved from the header switch wins over Accept-Language, survives a new session,
// is audited, and is set by a POST form carrying the CSRF token. The JSON API stays English.
func TestLanguage_SavedPreferenceOverridesHeader(t *testing.T) {
	b := setup(t)
	b.addOperator("a", access.RoleAdmin, "*")
	c := b.signIn("a")

	r := c.getLang("/", "zh-CN")
	mustContain(t, "dashboard before choosing", r.Body, `<html lang="zh-CN">`, `action="/settings/language"`, `name="csrf"`)

	if r = c.post("/settings/language", url.Values{"lang": {"en"}}, false); r.Status != 403 {
		t.Fatalf("switch without the CSRF token: %d, want 403", r.Status)
	}
	if r = c.post("/settings/language", url.Values{"lang": {"klingon"}}, true); r.Status != 400 || !strings.Contains(r.Body, "lang") {
		t.Fatalf("unknown language: %d %s", r.Status, r.Body)
	}
	if r = c.post("/settings/language", url.Values{"lang": {"en"}}, true); r.Status != 303 {
		t.Fatalf("switch to en: %d %s", r.Status, r.Body)
	}
	for i, cl := range []*client{c, b.signIn("a")} {
		r = cl.getLang("/", "zh-CN,zh;q=0.9")
		mustContain(t, "dashboard after choosing en", r.Body, `<html lang="en">`, ">Dashboard<")
		mustNotContain(t, "dashboard after choosing en", r.Body, "仪表盘")
		_ = i
	}
	if r = c.post("/settings/language", url.Values{"lang": {"zh-CN"}}, true); r.Status != 303 {
		t.Fatalf("switch to zh-CN: %d", r.Status)
	}
	r = c.getLang("/keys", "en-US")
	mustContain(t, "keys after choosing zh-CN", r.Body, `<html lang="zh-CN">`, "幂等键")

	var n int64
	b.db.Raw(`SELECT count(*) FROM audit_log WHERE action = 'operator.language' AND target = 'operator:a'`).Scan(&n)
	if n != 2 {
		t.Fatalf("%d audit entries for language changes, want 2", n)
	}
	var saved string
	b.db.Raw(`SELECT language FROM operators WHERE name = 'a'`).Scan(&saved)
	if saved != "zh-CN" {
		t.Fatalf("saved language %q", saved)
	}
}

// The sign-in page switches by cookie (no operator yet), with the sign-in form's CSRF token.
func TestLanguage_LoginPageSwitchesByCookie(t *testing.T) {
	b := setup(t)
	c := b.client()
	r := c.getLang("/login", "en")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(r.Body)
	if m == nil {
		t.Fatalf("no csrf on the sign-in page:\n%s", r.Body)
	}
	if r = c.post("/login/language", url.Values{"lang": {"zh-CN"}, "csrf": {"wrong"}}, false); r.Status != 403 {
		t.Fatalf("switch with a wrong token: %d", r.Status)
	}
	if r = c.post("/login/language", url.Values{"lang": {"zh-CN"}, "csrf": {m[1]}, "next": {"/keys"}}, false); r.Status != 303 {
		t.Fatalf("switch: %d %s", r.Status, r.Body)
	}
	r = c.getLang("/login", "en")
	mustContain(t, "sign-in after switching", r.Body, `<html lang="zh-CN">`, "密码")
}
