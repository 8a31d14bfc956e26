package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/chaos/report"
)

func TestChaosReport_RedrawsThePageFromTheJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	r := &report.Report{Seed: 42, Duration: "10s", StartedAt: start, EndedAt: start.Add(10 * time.Second), Passed: true,
		Samples:    []report.Sample{{T: 0, Requests: 10, ClaimsPerSec: 10, P50Ms: 3, P99Ms: 9}, {T: 1, Requests: 12, ClaimsPerSec: 11, P50Ms: 4, P99Ms: 12}},
		Faults:     []report.Fault{{T: 0.5, Kind: "kill-service", Target: "payments-1"}},
		Invariants: []report.Invariant{{Name: "no completed key lost", OK: true, Checked: 21}}}
	if err := report.Write(dir, r); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "redrawn")
	stdout, err := runIdemops(t, "chaos", "report", "--from", filepath.Join(dir, "report.json"), "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "report.html") + ": PASSED (seed 42)\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	first, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	again, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil || !bytes.Equal(first, again) {
		t.Errorf("the redrawn page differs from the one the run drew (err %v)", err)
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); !os.IsNotExist(err) {
		t.Errorf("the redraw wrote a report.json: %v", err)
	}
}

// TestChaosReport_BadInputExits2WithOneLine runs the real main (this test binary, re-executed)
// for the exit status and the one line on stderr.
func TestChaosReport_BadInputExits2WithOneLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out := filepath.Join(dir, "out")
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"--out", out}, "idemops: --from is required"},
		{[]string{"--from", filepath.Join(dir, "missing.json"), "--out", out}, "idemops: --from: not a chaos report: open "},
		{[]string{"--from", write("bad.json", `{"seed": 1,`), "--out", out}, "idemops: --from: not a chaos report: " + filepath.Join(dir, "bad.json") + ": invalid JSON"},
		{[]string{"--from", write("nul.json", "{\"seed\": 1,\x00}"), "--out", out}, "idemops: --from: not a chaos report: " + filepath.Join(dir, "nul.json") + ": contains a NUL byte at offset 11"},
		{[]string{"--from", write("esc.json", `{"faults": [{"kind": "a\u0000"}]}`), "--out", out}, "idemops: --from: not a chaos report: " + filepath.Join(dir, "esc.json") + ": faults[0].kind: contains a NUL byte"},
		{[]string{"--from", "x\x01\xff.json"}, "idemops: --from: is not valid UTF-8"},
		{[]string{"--from", write("ok.json", "{}"), "extra"}, `idemops: chaos report takes no arguments (got "extra")`},
	}
	for _, tt := range tests {
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdemopsMainHelper$")
		cmd.Env = append(os.Environ(), "IDEMOPS_MAIN_HELPER=1", "IDEMOPS_MAIN_ARGS="+strings.Join(append([]string{"chaos", "report"}, tt.args...), "\x1f"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%q: %v; want exit status 2", tt.args, err)
		}
		if got := strings.TrimSpace(stderr.String()); !strings.HasPrefix(got, tt.stderr) || strings.Contains(got, "\n") {
			t.Errorf("%q: stderr %q; want one line starting %q", tt.args, got, tt.stderr)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("bad input left %s behind: %v", out, err)
	}
}
