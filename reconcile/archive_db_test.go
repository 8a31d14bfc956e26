package reconcile_test

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/reconcile"
)

// A gzip bomb and a zip bomb given to a run are refused with a one-line reason; the run fails
// and nothing is imported. The same bill gzipped imports and matches like the plain one.
func TestPackedStatements_BombsRefusedNothingWritten(t *testing.T) {
	b := setup(t)
	k := b.key("packed-1", 12800, "CNY", claim.StateCompleted)
	job := b.createJob("wechat-gz", "/nonexistent/{date}.csv", 10*time.Minute)
	bill := wechatBill([]wechatLine{{At: billDay.Add(9 * time.Hour), Txn: k.ResourceID, Order: k.DownstreamKey, Status: "SUCCESS", Amount: 12800}}, 0)

	// A bill followed by 4 MiB of blank lines: it parses, but unpacks 1000×.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bill[:bytes.IndexByte(bill, '\n')+1])
	zw.Write([]byte(strings.Repeat("\n", 4<<20)))
	zw.Close()
	var zb bytes.Buffer
	z := zip.NewWriter(&zb)
	w, _ := z.Create("bill.csv")
	w.Write([]byte(strings.Repeat("\n", 4<<20)))
	z.Close()

	for name, file := range map[string][]byte{"gzip bomb": gz.Bytes(), "zip bomb": zb.Bytes()} {
		run, err := b.rec.ReconcilePacked(b.ctx, reconcile.RunRequest{Job: job, Import: reconcile.ImportRequest{Channel: "wechat",
			Format: "wechat", BillDate: billDate, Importer: "operator:alice"}}, bytes.NewReader(file), int64(len(file)), nil)
		if err == nil || run == nil || run.Status != reconcile.RunFailed || !strings.Contains(err.Error(), "bomb?") ||
			strings.Contains(err.Error(), "\n") {
			t.Fatalf("%s: run %+v, %v; want a failed run naming the bomb", name, run, err)
		}
		if n := b.count(`SELECT count(*) FROM statements`) + b.count(`SELECT count(*) FROM statement_lines`); n != 0 {
			t.Fatalf("%s: %d rows written", name, n)
		}
	}

	var good bytes.Buffer
	zw = gzip.NewWriter(&good)
	zw.Write(bill)
	zw.Close()
	run, err := b.rec.ReconcilePacked(b.ctx, reconcile.RunRequest{Job: job, Import: reconcile.ImportRequest{Channel: "wechat",
		Format: "wechat", BillDate: billDate, Importer: "operator:alice", SHA256: "0123"}}, bytes.NewReader(good.Bytes()), int64(good.Len()), nil)
	if err != nil || run.RowsMatched != 1 {
		t.Fatalf("gzipped bill: %+v %v", run, err)
	}
	if _, names := b.findings(run.ID); len(names) != 0 {
		t.Errorf("findings %q; want none", names)
	}
}
