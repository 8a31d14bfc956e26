package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemops/idemops/reconcile"
)

// TestParsesPaysimExports: the statements paysim exports (its golden files) are read by these
// parsers with their control totals agreeing — the simulator and the parsers follow one reference.
func TestParsesPaysimExports(t *testing.T) {
	for _, format := range []string{"wechat", "alipay", "stripe", "adyen"} {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join("..", "downstream", "paysim", "testdata", "statement_2024-03-15."+format+".csv")
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p, err := reconcile.ParserFor(format)
			if err != nil {
				t.Fatal(err)
			}
			var lines []reconcile.StatementLine
			sum, err := p.Parse(context.Background(), f, func(l reconcile.StatementLine) error {
				lines = append(lines, l)
				return nil
			})
			if err != nil {
				t.Fatalf("paysim's %s export does not parse: %v", format, err)
			}
			if len(lines) == 0 {
				t.Fatal("no lines")
			}
			if sum.Control != nil && !sum.ControlTotalsOK() {
				t.Fatalf("control totals disagree: %+v", sum.Control)
			}
			// Every layout but Alipay's detail (its settlement is in the 汇总 of the zip) states a
			// settlement, and paysim's agrees with its rows.
			if (len(sum.Settlements) == 0) != (format == "alipay") || !sum.SettlementsOK() {
				t.Fatalf("settlements %+v", sum.Settlements)
			}
			refunds := 0
			for _, l := range lines {
				if l.MerchantOrderNo == "" || l.ChannelTxnID == "" {
					t.Fatalf("line %d lacks ids: %+v", l.LineNo, l)
				}
				if l.Status == reconcile.StatusRefund {
					refunds++
					if l.AmountMinor >= 0 {
						t.Fatalf("refund line %d not negative", l.LineNo)
					}
				}
			}
			if refunds == 0 {
				t.Fatal("paysim's script has refunds; none parsed")
			}
		})
	}
}
