package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"
)

const statements = "../../reconcile/testdata"

// runIdemops runs the command in-process and returns stdout and the error main would print.
func runIdemops(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := execute(context.Background(), root)
	return out.String(), err
}

func TestReconcileParse_JSONIsOneObjectPerLineThenTheSummary(t *testing.T) {
	t.Parallel()
	out, err := runIdemops(t, "reconcile", "parse", "--format", "wechat", filepath.Join(statements, "wechat/all_trades.csv"), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %q", sc.Text())
		}
		objs = append(objs, m)
	}
	if len(objs) != 5 {
		t.Fatalf("%d objects; want 4 lines and a summary:\n%s", len(objs), out)
	}
	keys := []string{"line_no", "channel_txn_id", "merchant_order_no", "amount_minor", "currency", "status", "occurred_at",
		"fee_minor", "net_minor"}
	refund := objs[2]
	if len(refund) != len(keys) {
		t.Errorf("line object has keys %v; want exactly %v", refund, keys)
	}
	for _, k := range keys {
		if _, ok := refund[k]; !ok {
			t.Errorf("line object lacks %s", k)
		}
	}
	if refund["line_no"] != 4.0 || refund["amount_minor"] != -2800.0 || refund["status"] != "refund" ||
		refund["currency"] != "CNY" || refund["occurred_at"] != "2024-03-01T10:02:09Z" || refund["merchant_order_no"] != "ORD-20240301-0001" ||
		refund["fee_minor"] != -17.0 || refund["net_minor"] != -2783.0 {
		t.Errorf("refund line %v", refund)
	}
	sum, ok := objs[4]["summary"].(map[string]any)
	if !ok {
		t.Fatalf("last object %v is not a summary", objs[4])
	}
	if sum["lines"] != 4.0 || sum["total_minor"] != 133506.0 || sum["control_totals_ok"] != true {
		t.Errorf("summary %v", sum)
	}
}

func TestReconcileParse_StatementWithoutControlTotalsSaysNone(t *testing.T) {
	t.Parallel()
	out, err := runIdemops(t, "reconcile", "parse", "--format", "adyen", "--json", filepath.Join(statements, "adyen/settlement_detail_report_batch_42.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if len(lines) != 5 || !strings.Contains(last, `"control_totals":"none"`) || !strings.Contains(last, `"control_totals_ok":true`) {
		t.Fatalf("output:\n%s", out)
	}
}

func TestReconcileParse_ControlTotalMismatchPrintsTheTotalsAndFails(t *testing.T) {
	t.Parallel()
	out, err := runIdemops(t, "reconcile", "parse", "--format", "alipay", "--json", filepath.Join(statements, "alipay/bad_control_total.csv"))
	if err == nil || exitCode(err) != 1 || !strings.HasPrefix(err.Error(), "line 11: CONTROL_TOTAL") {
		t.Fatalf("err %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"control_totals_ok":false`) || !strings.Contains(last, `"stated":"4"`) {
		t.Fatalf("summary %s", last)
	}
}

func TestReconcileParse_HumanOutputWithAProfile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(statements, "profile/acmepay")
	out, err := runIdemops(t, "reconcile", "parse", "--profile", filepath.Join(dir, "profile.yaml"), filepath.Join(dir, "statement.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ORD-3001", "1250.00 EUR", "-250.00 EUR", "profile:acmepay: 5 lines, 1 rows that are not order lines skipped (FEE 1)",
		"total EUR 944.99", "control totals: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestReconcileParse_BadFlagsAreUsageErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(statements, "wechat/all_trades.csv")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("name: x\ncolumns: {}\n"), 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--format", "paypal", file}, `unknown statement format "paypal" (known: adyen, alipay, profile, stripe, wechat)`},
		{[]string{file}, "--format is required (known: adyen, alipay, profile, stripe, wechat)"},
		{[]string{"--format", "profile", file}, "--format profile needs --profile"},
		{[]string{"--format", "wechat", "--profile", bad, file}, "--profile goes with --format profile"},
		{[]string{"--profile", bad, file}, "bad.yaml: columns.amount: required"},
		{[]string{"--format", "wechat"}, "takes one statement file"},
		{[]string{"--format", "wechat", "--bogus", file}, "unknown flag: --bogus"},
	}
	for _, tt := range tests {
		_, err := runIdemops(t, append([]string{"reconcile", "parse"}, tt.args...)...)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v (exit %d); want exit 2 with %q", tt.args, err, exitCode(err), tt.want)
		}
	}
}

// TestReconcileParse_MalformedFileExitsNonZeroWithTheLine runs the real binary's main (this test
// binary, re-executed) to check the exit status and stderr a user sees.
func TestReconcileParse_MalformedFileExitsNonZeroWithTheLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"--format", "wechat", filepath.Join(statements, "wechat/bad_amount.csv")}, 1, `idemops: line 3: 订单金额: amount "12.345" has more than 2 decimals`},
		{[]string{"--format", "alipay", "--json", filepath.Join(statements, "alipay/bad_not_gbk.csv")}, 1, "idemops: line 7: bytes that are not valid GBK"},
		{[]string{"--format", "paypal", "x.csv"}, 2, `idemops: unknown statement format "paypal" (known: adyen, alipay, profile, stripe, wechat)`},
		{[]string{"--format", "wechat", "no/such.csv"}, 2, "idemops: open no/such.csv: no such file or directory"},
		{[]string{"--format", "wechat", "--max-bytes", "100", filepath.Join(statements, "wechat/all_trades.csv")}, 1, "idemops: line 1: statement too large: more than 100 bytes"},
	}
	for _, tt := range tests {
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdemopsMainHelper$")
		cmd.Env = append(os.Environ(), "IDEMOPS_MAIN_HELPER=1", "IDEMOPS_MAIN_ARGS="+strings.Join(append([]string{"reconcile", "parse"}, tt.args...), "\x1f"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tt.status {
			t.Errorf("%v: %v; want exit status %d", tt.args, err, tt.status)
		}
		if got := strings.TrimSpace(stderr.String()); !strings.HasPrefix(got, tt.stderr) || strings.Contains(got, "\n") {
			t.Errorf("%v: stderr %q; want one line starting %q", tt.args, got, tt.stderr)
		}
	}
}

// TestIdemopsMainHelper is not a test: re-executed with IDEMOPS_MAIN_HELPER=1 it runs main with
// the arguments in IDEMOPS_MAIN_ARGS.
func TestIdemopsMainHelper(t *testing.T) {
	if os.Getenv("IDEMOPS_MAIN_HELPER") != "1" {
		t.Skip("helper process for the CLI tests")
	}
	os.Args = append([]string{"idemops"}, strings.Split(os.Getenv("IDEMOPS_MAIN_ARGS"), "\x1f")...)
	main()
	os.Exit(0)
}

func TestReconcileParse_TextShowsFeeAndNet(t *testing.T) {
	t.Parallel()
	out, err := runIdemops(t, "reconcile", "parse", "--format", "alipay", filepath.Join(statements, "alipay/trade_detail.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasSuffix(strings.TrimSpace(lines[0]), "FEE                  NET") {
		t.Errorf("header %q lacks FEE and NET", lines[0])
	}
	// 商家实收 88.00, 服务费 -0.53: fee 0.53, net 87.47.
	if f := strings.Fields(lines[1]); len(f) < 2 || f[len(f)-2] != "0.53" || f[len(f)-1] != "87.47" {
		t.Errorf("first line %q; want fee 0.53 and net 87.47", lines[1])
	}
}

// reconcile parse reads Alipay's bill zip (业务明细 + 业务明细(汇总), GBK names) and shows the
// settlement; a gzip bomb is refused with one line naming it.
func TestReconcileParse_AlipayZipAndGzipBomb(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zipPath := filepath.Join(dir, "alipay.zip")
	{
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for name, src := range map[string]string{"2088_20240301_业务明细.csv": "alipay/trade_detail.csv",
			"2088_20240301_业务明细(汇总).csv": "alipay/trade_detail.summary.csv"} {
			gbk, _ := simplifiedchinese.GBK.NewEncoder().String(name)
			w, err := zw.CreateHeader(&zip.FileHeader{Name: gbk, Method: zip.Deflate, NonUTF8: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(statements, src))
			if err != nil {
				t.Fatal(err)
			}
			w.Write(b)
		}
		zw.Close()
		if err := os.WriteFile(zipPath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runIdemops(t, "reconcile", "parse", "--format", "alipay", zipPath)
	if err != nil || !strings.Contains(out, "bill") || !strings.Contains(out, "stated 1267.35") || !strings.Contains(out, "汇总 合计: 实收净额（元）") {
		t.Fatalf("zip: %v\n%s", err, out)
	}

	bombPath := filepath.Join(dir, "bomb.csv.gz")
	{
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write([]byte(strings.Repeat("\n", 4<<20)))
		zw.Close()
		os.WriteFile(bombPath, buf.Bytes(), 0o644)
	}
	_, err = runIdemops(t, "reconcile", "parse", "--format", "wechat", bombPath)
	if err == nil || !strings.Contains(err.Error(), "gzip stream unpacks to more than 200× its compressed size") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("gzip bomb: %v", err)
	}
}
