package reconcile

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"
)

// zipOf builds a zip of name → content; names are written in GBK without the UTF-8 flag, as
// Alipay's bill zip has them.
func zipOf(t testing.TB, entries [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		name, err := simplifiedchinese.GBK.NewEncoder().String(e[0])
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, NonUTF8: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, e[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipOf(t testing.TB, content []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(content); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Alipay's bill zip — 业务明细 and 业务明细(汇总), GBK names — is unpacked into the statement and
// its summary, and the summary's 实收净额 is the settlement the detail is checked against.
func TestUnpackAlipayZipWithGBKNames(t *testing.T) {
	t.Parallel()
	z := zipOf(t, [][2]string{
		{"20881234567890120156_20240301_业务明细.csv", readFile(t, "testdata/alipay/trade_detail.csv")},
		{"20881234567890120156_20240301_业务明细(汇总).csv", readFile(t, "testdata/alipay/trade_detail.summary.csv")},
	})
	u, err := Unpack(bytes.NewReader(z), int64(len(z)), ArchiveLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if u.Packing != PackingZip || u.StatementName != "20881234567890120156_20240301_业务明细.csv" ||
		u.SummaryName != "20881234567890120156_20240301_业务明细(汇总).csv" {
		t.Fatalf("unpacked %s %q %q", u.Packing, u.StatementName, u.SummaryName)
	}
	p, _ := ParserFor("alipay", WithSummaryFile(u.Summary))
	sum, err := p.Parse(context.Background(), u.Statement, func(StatementLine) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Settlements) != 1 || sum.Settlements[0].Stated != 126735000 || !sum.SettlementsOK() {
		t.Errorf("settlements %+v; want 1,267.35 CNY stated and agreeing", sum.Settlements)
	}
}

// A WeChat bill served gzip-compressed reads like the plain one.
func TestUnpackGzipBill(t *testing.T) {
	t.Parallel()
	plain := readFile(t, "testdata/wechat/all_trades.csv")
	gz := gzipOf(t, []byte(plain))
	u, err := Unpack(bytes.NewReader(gz), int64(len(gz)), ArchiveLimits{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(u.Statement)
	if err != nil || string(got) != plain || u.Packing != PackingGzip {
		t.Fatalf("gzip: %s %v, %d bytes", u.Packing, err, len(got))
	}
}

// Archives that would unpack to more than the limits allow are refused with one line naming
// the reason: a zip bomb from its declared sizes before anything is read, a zip with too many
// entries, a gzip bomb while it is read, a zip whose statement cannot be told.
func TestUnpackRefusesBombs(t *testing.T) {
	t.Parallel()
	bomb := strings.Repeat("\n", 4<<20) // 4 MiB that deflate to a few KiB
	for _, tt := range []struct {
		name string
		file []byte
		lim  ArchiveLimits
		want string
	}{
		{"zip bomb", zipOf(t, [][2]string{{"bill.csv", bomb}}), ArchiveLimits{}, "more than 200× (a zip bomb?)"},
		{"zip over the size limit", zipOf(t, [][2]string{{"a.csv", "x,y\n1,2\n"}, {"b_汇总.csv", strings.Repeat("1,2\n", 1000)}}),
			ArchiveLimits{MaxBytes: 1000}, "unpacks to more than 1000 bytes"},
		{"too many entries", zipOf(t, func() [][2]string {
			var e [][2]string
			for i := 0; i < 17; i++ {
				e = append(e, [2]string{strings.Repeat("f", i+1) + ".csv", "x"})
			}
			return e
		}()), ArchiveLimits{}, "zip holds 17 files, at most 16"},
		{"two statements", zipOf(t, [][2]string{{"a.csv", "x"}, {"b.csv", "y"}}), ArchiveLimits{}, "cannot tell which to import (a.csv, b.csv)"},
		{"gzip bomb", gzipOf(t, []byte(bomb)), ArchiveLimits{}, "gzip stream unpacks to more than 200× its compressed size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, err := Unpack(bytes.NewReader(tt.file), int64(len(tt.file)), tt.lim)
			if err == nil {
				_, err = io.Copy(io.Discard, u.Statement)
			}
			if err == nil || !errors.Is(err, ErrArchive) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%v; want one line with %q", err, tt.want)
			}
		})
	}
}

// A parser handed a gzip stream directly (not through Unpack) refuses a gzip bomb too.
func TestParserRefusesGzipBomb(t *testing.T) {
	t.Parallel()
	bomb := gzipOf(t, []byte(strings.Repeat("\n", 4<<20)))
	p, _ := ParserFor("wechat")
	_, err := p.Parse(context.Background(), bytes.NewReader(bomb), func(StatementLine) error { return nil })
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 200× its compressed size") {
		t.Fatalf("%v; want the gzip bomb refused", err)
	}
}

// A bill query's answer gives the bill's URL, or says the bill is not ready (retried), or fails.
func TestBillDownloadURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body, url string
		notReady  bool
	}{
		{`{"alipay_data_dataservice_bill_downloadurl_query_response":{"code":"10000","msg":"Success","bill_download_url":"http://h/b.zip"},"sign":"x"}`, "http://h/b.zip", false},
		{`{"bill_download_url":"https://h/c.zip"}`, "https://h/c.zip", false},
		{`{"r":{"code":"40004","msg":"Business Failed","sub_code":"isp.bill_not_exist","sub_msg":"账单不存在"}}`, "", true},
		{`{"r":{"code":"40004","sub_code":"isv.invalid-arguments"}}`, "", false},
		{`{"bill_download_url":"file:///etc/passwd"}`, "", false},
		{`not json`, "", false},
	} {
		u, err := billDownloadURL(strings.NewReader(tt.body))
		if u != tt.url || (tt.url == "") != (err != nil) || errors.Is(err, ErrNotReady) != tt.notReady {
			t.Errorf("%s: %q %v", tt.body, u, err)
		}
	}
}
