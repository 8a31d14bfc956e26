package reconcile_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
	"github.com/idemops/idemops/reconcile"
)

// keyAt claims name for amount/currency and completes it on the bill date, its downstream call
// having gone through account ("": a holder that does not say, as before accounts were recorded).
func (b *bundle) keyAt(name string, amount int64, currency, account string) localKey {
	b.t.Helper()
	intent := fmt.Sprintf(`{"amount_minor": %d, "currency": %q, "payee": "acme"}`, amount, currency)
	out, err := b.store.Claim(b.ctx, claim.Request{Tenant: "t1", Operation: b.op.Name(), Key: name,
		Intent: json.RawMessage(intent), Spec: b.op.Intent(), Actor: "service:test"})
	if err != nil || out.Kind != claim.Acquired {
		b.t.Fatalf("claim %s: %v %v", name, out, err)
	}
	l := out.Lease
	l.ChannelAccount = account
	k := localKey{ID: l.KeyID, DownstreamKey: l.DownstreamKey, ResourceID: "ch_" + name}
	if err := b.store.Complete(b.ctx, nil, l, &claim.Snapshot{Status: 201, ResourceID: k.ResourceID}); err != nil {
		b.t.Fatalf("complete %s: %v", name, err)
	}
	b.completedAt(k, billDay.Add(10*time.Hour))
	return k
}

// TestMatch_AStatementMeetsOnlyTheKeysOfItsAccount: a statement is matched against the keys
// whose downstream call went through its channel account — whatever their currency — and the
// keys that do not say (recorded before accounts were), those only in the account's currencies;
// never against keys of another account. The run counts the findings about keys that do not say.
// Both matching plans (lean: no repeated line; full: a repeated txn id) agree.
func TestMatch_AStatementMeetsOnlyTheKeysOfItsAccount(t *testing.T) {
	for _, plan := range []string{"lean", "full"} {
		t.Run(plan, func(t *testing.T) {
			b := setup(t)
			if _, err := b.rec.SetChannelSettings(b.ctx, b.db, "wechat", reconcile.KindGeneric,
				reconcile.AccountSettings{Currencies: []string{"cny"}}, "test"); err != nil {
				t.Fatal(err)
			}
			listed := b.keyAt("listed", 1000, "CNY", "wechat")        // on the statement: agrees
			missing := b.keyAt("missing", 2000, "CNY", "wechat")      // not on it: LOCAL_ONLY
			usdHere := b.keyAt("usd-here", 3000, "USD", "wechat")     // recorded here in USD, not on it: LOCAL_ONLY
			b.keyAt("alipay", 4000, "CNY", "alipay")                  // another account's: not this statement's
			b.keyAt("stripe", 5000, "USD", "stripe")                  // another account's
			elsewhere := b.keyAt("elsewhere", 6000, "CNY", "alipay")  // another account's, yet on this statement
			legacyCNY := b.keyAt("legacy-cny", 7000, "CNY", "")       // says nothing, in CNY: LOCAL_ONLY, counted
			b.keyAt("legacy-usd", 8000, "USD", "")                    // says nothing, not in CNY: not expected here
			legacyListed := b.keyAt("legacy-listed", 9000, "CNY", "") // says nothing, on the statement: agrees
			lines := []wechatLine{
				{At: billDay.Add(10 * time.Hour), Txn: "wx-1", Order: listed.DownstreamKey, Status: "SUCCESS", Amount: 1000},
				{At: billDay.Add(11 * time.Hour), Txn: "wx-2", Order: elsewhere.DownstreamKey, Status: "SUCCESS", Amount: 6000},
				{At: billDay.Add(12 * time.Hour), Txn: "wx-3", Order: legacyListed.DownstreamKey, Status: "SUCCESS", Amount: 9000},
			}
			want := []string{
				"LOCAL_ONLY key:" + itoa(missing.ID),
				"LOCAL_ONLY key:" + itoa(usdHere.ID),
				"LOCAL_ONLY key:" + itoa(legacyCNY.ID),
				"CHANNEL_ONLY txn:wx-2",
			}
			if plan == "full" {
				lines = append(lines, wechatLine{At: billDay.Add(13 * time.Hour), Txn: "wx-1", Order: listed.DownstreamKey,
					Status: "SUCCESS", Amount: 1000})
				want = append(want, "DUPLICATE_IN_FILE txn:wx-1")
			}
			job := b.createJob("wechat-daily", "/unused/{date}.csv", 0)
			run, err := b.reconcileFile(job, wechatBill(lines, 0))
			if err != nil {
				t.Fatal(err)
			}
			_, got := b.findings(run.ID)
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Fatalf("findings\n got %q\nwant %q", got, want)
			}
			if run.KeysWithoutAccount != 1 {
				t.Errorf("run says %d findings are about keys without an account; want 1 (legacy-cny)", run.KeysWithoutAccount)
			}
			stored, err := b.rec.GetRun(b.ctx, run.ID)
			if err != nil || stored.KeysWithoutAccount != 1 {
				t.Errorf("stored run: %+v %v; want keys_without_account 1", stored, err)
			}
		})
	}
}

// TestReconcile_ReuploadUnderAnotherChannelNeverRelabelsEarlierFindings: the same statement
// file uploaded under a second channel account is that account's statement: its run's findings
// carry the second account, and the first account's findings keep their channel, their run and
// their count (before, the file was taken as already imported and matched again under the first
// account, the second run labelling and counting the first account's findings).
func TestReconcile_ReuploadUnderAnotherChannelNeverRelabelsEarlierFindings(t *testing.T) {
	b := setup(t)
	missing := b.keyAt("missing", 2000, "CNY", "")
	file := wechatBill([]wechatLine{{At: billDay.Add(10 * time.Hour), Txn: "wx-9", Order: "nobody", Status: "SUCCESS", Amount: 500}}, 0)
	first := b.createJob("wechat-daily", "/unused/{date}.csv", 0)
	run1, err := b.reconcileFile(first, file)
	if err != nil {
		t.Fatal(err)
	}
	before, names1 := b.findings(run1.ID)
	sort.Strings(names1)
	if want := []string{"CHANNEL_ONLY txn:wx-9", "LOCAL_ONLY key:" + itoa(missing.ID)}; !slices.Equal(names1, want) {
		t.Fatalf("first upload's findings %q, want %q", names1, want)
	}

	second := b.createJob("alipay-daily", "/unused/{date}.csv", 0, func(s *reconcile.JobSpec) { s.Channel = "alipay-2088" })
	run2, err := b.reconcileFile(second, file)
	if err != nil {
		t.Fatal(err)
	}
	if run2.AlreadyImported || run2.StatementID == nil || *run2.StatementID == *run1.StatementID {
		t.Fatalf("the upload under alipay-2088 reused wechat's statement: %+v", run2)
	}
	fs2, err := b.rec.ListFindings(b.ctx, reconcile.FindingFilter{RunID: run2.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs2) != 2 {
		t.Fatalf("second run's findings: %d, want 2", len(fs2))
	}
	for _, f := range fs2 {
		if f.Channel != "alipay-2088" {
			t.Errorf("second run's finding %s %s carries channel %s", f.Kind, f.Subject, f.Channel)
		}
	}
	after, names := b.findings(run1.ID)
	sort.Strings(names)
	if !slices.Equal(names, names1) {
		t.Fatalf("the first run's findings changed: %q, was %q", names, names1)
	}
	for n, f := range after {
		if f.Channel != "wechat" || f.RunID != run1.ID || f.ID != before[n].ID || f.State != reconcile.FindingOpen {
			t.Errorf("first account's finding %s relabelled or moved: %+v", n, f)
		}
	}
	stored, err := b.rec.GetRun(b.ctx, run1.ID)
	if err != nil || !mapsEqual(stored.Counts, run1.Counts) {
		t.Errorf("first run recounted: %+v (was %v) %v", stored, run1.Counts, err)
	}
	if n := b.count(`SELECT count(*) FROM discrepancies WHERE channel = 'wechat'`); n != 2 {
		t.Errorf("%d wechat findings; want 2", n)
	}

	// The same file under the first account again is a re-run there, as before.
	again, err := b.reconcileFile(first, file)
	if err != nil || !again.AlreadyImported || *again.StatementID != *run1.StatementID {
		t.Fatalf("re-upload under wechat: %+v %v", again, err)
	}
}

// TestMatch_AKeyCompletedAfterTheStatementWasReadIsNotLocalOnly: a statement of a day still
// running lists the charges made before it was read; a key completed afterwards (its charge
// made after the read) is not LOCAL_ONLY of it — that run started, and so read the statement,
// at 11:00 — while a key completed at 10:00 and missing is. Matched again by a run after the
// day, the late key missing from the statement is LOCAL_ONLY. (The demo reconciles today's
// statement every minute: each run made a LOCAL_ONLY of a payment completed while it ran,
// closed by the next run.)
func TestMatch_AKeyCompletedAfterTheStatementWasReadIsNotLocalOnly(t *testing.T) {
	b := setup(t)
	listed := b.keyAt("listed", 1000, "CNY", "wechat")
	early := b.keyAt("early", 2000, "CNY", "wechat")
	late := b.keyAt("late", 3000, "CNY", "wechat")
	b.completedAt(late, billDay.Add(12*time.Hour))
	imp, err := b.rec.Import(b.ctx, reconcile.ImportRequest{Channel: "wechat", Format: "wechat", Location: shanghai,
		Importer: "operator:alice"}, bytesReader(wechatBill([]wechatLine{
		{At: billDay.Add(10 * time.Hour), Txn: "wx-1", Order: listed.DownstreamKey, Status: "SUCCESS", Amount: 1000}}, 0)), nil)
	if err != nil {
		t.Fatal(err)
	}
	match := func(startedAt *time.Time) []string {
		t.Helper()
		run, err := b.rec.StartRun(b.ctx, nil, "wechat", billDate, "operator:alice")
		if err != nil {
			t.Fatal(err)
		}
		if startedAt != nil {
			pgtest.Exec(t, b.db, `UPDATE recon_runs SET started_at = ? WHERE id = ?`, *startedAt, run)
		}
		if _, err := b.rec.Match(b.ctx, run, imp.StatementID, reconcile.MatchSettings{Operations: []string{b.op.Name()},
			Location: shanghai}); err != nil {
			t.Fatal(err)
		}
		_, got := b.findings(run)
		sort.Strings(got)
		return got
	}
	noon := billDay.Add(11 * time.Hour)
	if got, want := match(&noon), []string{"LOCAL_ONLY key:" + itoa(early.ID)}; !slices.Equal(got, want) {
		t.Errorf("read at 11:00: findings %q, want %q", got, want)
	}
	want := []string{"LOCAL_ONLY key:" + itoa(early.ID), "LOCAL_ONLY key:" + itoa(late.ID)}
	sort.Strings(want)
	if got := match(nil); !slices.Equal(got, want) {
		t.Errorf("read after the day: findings %q, want %q", got, want)
	}
}
