package reconcile_test

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
)

// The import notes whether any txn id or order number repeats, so that the matcher can skip its
// duplicate passes; a key met by a second line through its txn id is found all the same.
func TestMatch_DuplicatePassesFollowWhatTheImportSaw(t *testing.T) {
	b := setup(t)
	k := b.key("twice", 50000, "CNY", claim.StateCompleted)
	at := billDay.Add(10 * time.Hour)
	lines := []wechatLine{
		{At: at, Txn: "4200000100", Order: k.DownstreamKey, Status: "SUCCESS", Amount: 50000},
		// The channel lost the order number here and kept our resource id as its txn id.
		{At: at.Add(time.Minute), Txn: k.ResourceID, Order: "ffffffffffffffffffffffffffffffff", Status: "SUCCESS", Amount: 50000},
	}
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	run, err := b.reconcileFile(job, wechatBill(lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(`SELECT count(*) FROM statements WHERE repeated_txn_ids = false AND repeated_order_nos = false`); n != 1 {
		t.Fatalf("the import noted repeats in a statement without any (%d statements say none)", n)
	}
	if _, names := b.findings(run.ID); !slices.Contains(names, "DUPLICATE_AT_CHANNEL key:"+itoa(k.ID)) {
		t.Fatalf("findings %q: the double charge matched through the txn id was missed", names)
	}
}

// A statement imported before the import noted repeats (NULL) is probed for them instead.
func TestMatch_StatementWithoutRepeatNotesIsProbed(t *testing.T) {
	b := setup(t)
	w := buildWorld(b)
	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	file := wechatBill(w.lines, 0)
	if _, err := b.reconcileFile(job, file); err != nil {
		t.Fatal(err)
	}
	if n := b.count(`SELECT count(*) FROM statements WHERE repeated_txn_ids AND repeated_order_nos`); n != 1 {
		t.Fatalf("the import did not note the world's repeated txn id and order number")
	}
	b.count(`WITH u AS (UPDATE statements SET repeated_txn_ids = NULL, repeated_order_nos = NULL RETURNING 1) SELECT count(*) FROM u`)
	run, err := b.reconcileFile(job, file)
	if err != nil {
		t.Fatal(err)
	}
	_, names := b.findings(run.ID)
	sort.Strings(names)
	if !slices.Equal(names, w.want) {
		t.Fatalf("findings\n got %q\nwant %q", names, w.want)
	}
}

// Without repeats the matcher takes its lean plan (one join keeps only the lines and keys that
// can make a finding); it finds the same as the full plan, and counts every order line.
func TestMatch_LeanPlanFindsWhatTheFullPlanFinds(t *testing.T) {
	b := setup(t)
	w := buildWorld(b)
	var lines []wechatLine
	seen := map[string]bool{}
	for _, l := range w.lines {
		// Drop the repeats (the double charge's second txn, the txn listed twice) and the line
		// matched through its txn id, each of which sends the matcher to its full plan.
		if l.Txn == "4200000011" || (l.Txn == "4200000012" && seen[l.Txn]) || l.Order == "" {
			continue
		}
		seen[l.Txn] = true
		lines = append(lines, l)
	}
	var want []string
	for _, name := range w.want {
		if !strings.HasPrefix(name, "DUPLICATE_") {
			want = append(want, name)
		}
	}
	// The key matched by txn id in the full world has no line here: it is LOCAL_ONLY now.
	want = append(want, "LOCAL_ONLY key:"+itoa(w.keys["by-txn"].ID))
	sort.Strings(want)

	job := b.createJob("wechat-daily", "/nonexistent/{date}.csv", 10*time.Minute)
	run, err := b.reconcileFile(job, wechatBill(lines, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(`SELECT count(*) FROM statements WHERE NOT repeated_txn_ids AND NOT repeated_order_nos AND order_lines = 9`); n != 1 {
		t.Fatalf("the import did not note 9 order lines without repeats")
	}
	_, names := b.findings(run.ID)
	sort.Strings(names)
	if !slices.Equal(names, want) {
		t.Fatalf("findings\n got %q\nwant %q", names, want)
	}
	// 10 lines in the file, the refund is not an order line; of the 9, the unknown order has no key.
	if run.RowsLoaded != 10 || run.RowsMatched != 8 {
		t.Errorf("loaded %d, matched %d; want 10, 8", run.RowsLoaded, run.RowsMatched)
	}
}
