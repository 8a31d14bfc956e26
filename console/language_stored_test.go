package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/replay"
)

// What a replay request replays and how it ended, and each bulk item's detail, are stored as
// phrases beside their English text: a Chinese operator's pages say them in Chinese, an English
// operator reading the same rows later sees English, and the JSON API stays English — whatever
// language the operator who made them had.
func TestLanguage_StoredReplayTextsSaidInTheReadersLanguage(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "acme")
	b.addOperator("eve", access.RoleOperator, "acme")
	tok := b.token("olga")
	zh := b.signIn("olga")
	if r := zh.post("/settings/language", url.Values{"lang": {"zh-CN"}}, true); r.Status != 303 {
		t.Fatalf("switch to zh-CN: %d", r.Status)
	}
	en := b.signIn("eve")

	// A single replay, made in Chinese.
	k := b.seedFailed("acme", "zh-one", `{"amount":202,"currency":"EUR","payee":"alice"}`, true)
	b.fakeOp.has(k, "ch_zh")
	_, token := zh.previewToken(k.ID)
	got := zh.post(fmt.Sprintf("/keys/%d/replay", k.ID), url.Values{"token": {token}, "reason": {"lost charge"}}, true)
	if got.Status != 303 {
		t.Fatalf("confirm: %d %s", got.Status, truncate(got.Body, 300))
	}
	reqPath := got.Location
	const (
		zhAction  = "一笔付给 alice、金额 2.02 EUR 的 扣款"
		zhOutcome = "已记录：渠道已有此单据（ch_zh）；未发送任何内容"
		enAction  = "a charge of 2.02 EUR to alice"
		enOutcome = "recorded: the channel already had it (ch_zh); nothing was sent"
	)
	for _, path := range []string{reqPath, "/replays"} {
		page := zh.get(path).Body
		mustContain(t, "zh-CN "+path, page, zhOutcome)
		mustNotContain(t, "zh-CN "+path, page, enOutcome, enAction)
		page = en.getLang(path, "").Body
		mustContain(t, "en "+path, page, enOutcome)
		mustNotContain(t, "en "+path, page, zhOutcome, zhAction)
	}
	mustContain(t, "zh-CN request page", zh.get(reqPath).Body, zhAction)
	mustContain(t, "en request page", en.getLang(reqPath, "").Body, enAction)
	mustContain(t, "zh-CN key's earlier replays", zh.get(fmt.Sprintf("/keys/%d/replay", k.ID)).Body, zhOutcome)
	api := zh.api("/api/v1"+reqPath, tok)
	req := decode[replay.Request](t, api)
	if req.Preview != enAction || req.Outcome == nil || *req.Outcome != enOutcome || hasHan(api.Body) {
		t.Errorf("the request through the API: %s, want English", api.Body)
	}

	// A bulk replay, started in Chinese: a key found (recorded), one not found yet (parked), one
	// above the approval amount (waits), and the key replayed above (completed: refused).
	b.fakeOp.has(b.seedFailed("acme", "zh-found", `{"amount":100,"currency":"USD"}`, true), "ch_found")
	b.seedFailed("acme", "zh-lost", `{"amount":200,"currency":"USD"}`, true)
	b.seedFailed("acme", "zh-big", `{"amount":300000,"currency":"USD"}`, true)
	got = zh.post("/replays/bulk", url.Values{"tenant": {"acme"}, "scope": {"all"}}, true)
	if got.Status != 200 {
		t.Fatalf("bulk preview: %d %s", got.Status, truncate(got.Body, 300))
	}
	form := bulkStartForm(t, got.Body)
	form.Set("reason", "channel outage")
	got = zh.post("/replays/bulk/start", form, true)
	if got.Status != 303 {
		t.Fatalf("bulk start: %d %s", got.Status, truncate(got.Body, 300))
	}
	runPath := got.Location
	var id int64
	fmt.Sscanf(runPath, "/replays/bulk/%d", &id)
	b.waitBulk(id)
	zhDetails := []string{"已记录：渠道已有此单据（ch_found）；未发送任何内容", "第一次未找到——将在隔离期结束后（",
		"金额高于审批阈值：等待第二位操作员（请求 ", "该幂等键已完成：已存储的响应就是答复，不会重放"}
	enDetails := []string{"recorded: the channel already had it (ch_found); nothing was sent", "not found once — will re-check after the quarantine (at ",
		"above the approval amount: waiting for a second operator (request ", "the key is completed: its stored response is the answer, nothing is replayed"}
	page := zh.get(runPath).Body
	mustContain(t, "zh-CN bulk run", page, zhDetails...)
	mustNotContain(t, "zh-CN bulk run", page, enDetails...)
	api = zh.api("/api/v1"+runPath, tok)
	run := decode[struct {
		Items []replay.BulkItem `json:"items"`
	}](t, api)
	var details []string
	for _, it := range run.Items {
		if it.Detail != nil {
			details = append(details, *it.Detail)
		}
	}
	mustContain(t, "bulk items through the API", strings.Join(details, "\n"), enDetails...)
	if hasHan(api.Body) {
		t.Errorf("the bulk run through the API holds Chinese: %s", api.Body)
	}

	// A row stored before the phrases (its phrase columns NULL) shows its English text.
	b.exec(`UPDATE replay_requests SET outcome_phrase = NULL, preview_phrase = NULL WHERE id = ?`, req.ID)
	mustContain(t, "zh-CN request page of an older row", zh.get(reqPath).Body, enOutcome, enAction)

	// The operator who started the run in Chinese reads it later in English.
	if r := zh.post("/settings/language", url.Values{"lang": {"en"}}, true); r.Status != 303 {
		t.Fatalf("switch to en: %d", r.Status)
	}
	page = zh.get(runPath + "/progress").Body
	mustContain(t, "en bulk run", page, enDetails...)
	mustNotContain(t, "en bulk run", page, zhDetails...)
}

// A daemon job run's error is said in the reader's language: from the phrase the job's error
// carried, or, for the daemon's own fixed texts, looked up whole; the API stays English.
func TestLanguage_JobRunErrorsSaidInTheReadersLanguage(t *testing.T) {
	b := setup(t)
	b.addOperator("olga", access.RoleOperator, "*")
	b.addOperator("eve", access.RoleOperator, "*")
	tok := b.token("olga")
	zh := b.signIn("olga")
	if r := zh.post("/settings/language", url.Values{"lang": {"zh-CN"}}, true); r.Status != 303 {
		t.Fatalf("switch to zh-CN: %d", r.Status)
	}
	en := b.signIn("eve")
	why := errs.Phrasef("%s: %s does not exist yet", errs.Verbatim("statement not ready"), "/data/x.csv")
	phrase, _ := json.Marshal(why)
	var ids []int64
	if err := b.db.Raw(`INSERT INTO job_runs (job, trigger, replica, status, deadline_at, finished_at, error, error_phrase)
		VALUES ('reconcile', 'cli', 'r1', 'failed', now(), now(), ?, ?::jsonb), ('sweep', 'cli', 'r1', 'abandoned', now(), now(), ?, NULL)
		RETURNING id`, why.String(), string(phrase), daemon.ErrTextEarlierLeader).Scan(&ids).Error; err != nil || len(ids) != 2 {
		t.Fatalf("seed job runs: %v %v", ids, err)
	}
	for i, want := range []struct{ zh, en string }{
		{"对账单尚未就绪：/data/x.csv 尚不存在", "statement not ready: /data/x.csv does not exist yet"},
		{"被之前的主节点留在运行状态", daemon.ErrTextEarlierLeader},
	} {
		path := fmt.Sprintf("/jobs/runs/%d", ids[i])
		page := zh.get(path).Body
		mustContain(t, "zh-CN "+path, page, want.zh)
		mustNotContain(t, "zh-CN "+path, page, want.en)
		mustContain(t, "en "+path, en.getLang(path, "").Body, want.en)
		api := zh.api("/api/v1"+path, tok)
		if !strings.Contains(api.Body, want.en) || hasHan(api.Body) || strings.Contains(api.Body, "Phrase") {
			t.Errorf("%s through the API: %s, want its English text only", path, api.Body)
		}
	}
	mustContain(t, "zh-CN jobs page", zh.get("/jobs").Body, "对账单尚未就绪：/data/x.csv 尚不存在", "被之前的主节点留在运行状态")
}
