package reconcile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodProfile = `name: acme
columns:
  merchant_order_no: order
  amount: amount
  status: status
  occurred_at: at
currency: USD
status_map:
  OK: success
`

func TestProfile_BadProfileNamesFileAndField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"empty", "", "acme.yaml: empty profile"},
		{"unknown key", goodProfile + "colour: blue\n", "acme.yaml: yaml: unmarshal errors:"},
		{"not yaml", "name: [", "acme.yaml: yaml:"},
		{"no name", strings.Replace(goodProfile, "name: acme", "name: ''", 1), "acme.yaml: name: required"},
		{"no amount", strings.Replace(goodProfile, "  amount: amount\n", "", 1), "acme.yaml: columns.amount: required"},
		{"no ids", strings.Replace(goodProfile, "  merchant_order_no: order\n", "", 1), "acme.yaml: columns.merchant_order_no: required"},
		{"no currency", strings.Replace(goodProfile, "currency: USD\n", "", 1), "acme.yaml: currency: required when there is no columns.currency"},
		{"bad currency", strings.Replace(goodProfile, "currency: USD", "currency: DOLLAR", 1), `acme.yaml: currency: unknown currency "DOLLAR"`},
		{"bad encoding", goodProfile + "encoding: latin1\n", `acme.yaml: encoding: "latin1" is not utf-8 or gbk`},
		{"bad delimiter", goodProfile + "delimiter: ';;'\n", `acme.yaml: delimiter: ";;" is not one printable`},
		{"bad header row", goodProfile + "header_row: 0\n", "acme.yaml: header_row: 0: lines count from 1"},
		{"bad zone", goodProfile + "timezone: Mars/Olympus\n", `acme.yaml: timezone: "Mars/Olympus" is not an IANA time zone`},
		{"bad layout", goodProfile + "time_layout: hh:mm\n", `acme.yaml: time_layout: "hh:mm" does not read back a date`},
		{"bad units", goodProfile + "amount_units: cents\n", `acme.yaml: amount_units: "cents" is not major or minor`},
		{"bad sign", goodProfile + "sign: negative\n", `acme.yaml: sign: "negative" is not signed or unsigned`},
		{"bad thousands", goodProfile + "thousands_separator: '.'\n", `acme.yaml: thousands_separator: "." is not one of`},
		{"no status map", strings.Replace(goodProfile, "status_map:\n  OK: success\n", "", 1), "acme.yaml: status_map: required"},
		{"bad status", strings.Replace(goodProfile, "OK: success", "OK: paid", 1), `acme.yaml: status_map.OK: "paid" is not one of success, refund`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseProfile("acme.yaml", []byte(tt.yaml))
			if !errors.Is(err, ErrProfile) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v; want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
	if _, err := ParseProfile("acme.yaml", []byte(goodProfile)); err != nil {
		t.Fatalf("good profile: %v", err)
	}
}

func TestLoadProfile_FileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := LoadProfile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, ErrProfile) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, []byte(goodProfile+"#"+strings.Repeat("x", maxProfileBytes)), 0o644)
	if _, err := LoadProfile(big); !errors.Is(err, ErrProfile) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

func TestProfile_MinorUnitsUnixTimesAndSkippedRows(t *testing.T) {
	t.Parallel()
	prof, err := ParseProfile("p.yaml", []byte(`name: tabs
delimiter: "\t"
strip_prefix: "'"
columns:
  channel_txn_id: id
  amount: cents
  currency: cur
  status: st
  occurred_at: ts
time_layout: unix
amount_units: minor
status_map:
  paid: success
  back: refund
  fee: skip
`))
	if err != nil {
		t.Fatal(err)
	}
	text := "id\tcents\tcur\tst\tts\n'T1\t'1999\tusd\tpaid\t1709251200\n'T2\t-500\tjpy\tback\t1709251201\n'T3\t-5\tusd\tfee\t1709251202\n"
	lines, sum, err := parseString(t, FormatProfile, text, WithProfile(prof))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || lines[0].ChannelTxnID != "T1" || lines[0].AmountMinor != 1999 || lines[0].Currency != "USD" ||
		lines[1].AmountMinor != -500 || lines[1].Currency != "JPY" || lines[0].OccurredAt.Unix() != 1709251200 {
		t.Fatalf("lines %+v", lines)
	}
	if sum.Skipped["fee"] != 1 || sum.Format != "profile:tabs" {
		t.Fatalf("summary %+v", sum)
	}
}
