package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/downstream/paysim"
	"github.com/idemops/idemops/internal/testinfra/syncbuf"
)

func TestPaysim_BadFlagsAreOneLineAndExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--error-rate", "2"}, "paysim: --error-rate: must be between 0 and 1, got 2"},
		{[]string{"--drop-response-rate", "x"}, `paysim: invalid argument "x" for "--drop-response-rate" flag`},
		{[]string{"--latency", "-1s"}, "paysim: --latency: must not be negative, got -1s"},
		{[]string{"--addr", "nonsense"}, `paysim: --addr: "nonsense" is not host:port`},
		{[]string{"--no-such-flag"}, "paysim: unknown flag: --no-such-flag"},
		{[]string{"--notify-duplicate-rate", "1.5"}, "paysim: --notify-duplicate-rate: must be between 0 and 1, got 1.5"},
		{[]string{"--notify-url", "ftp://x"}, `paysim: --notify-url: "ftp://x" is not an http(s) URL`},
		{[]string{"--notify-delay", "0s"}, "paysim: --notify-delay: must be between 0 and 1h, got 0s"},
		{[]string{"extra"}, `paysim: unexpected argument "extra" (paysim takes flags only)`},
	} {
		var stdout, stderr syncbuf.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr, nil)
		out := stderr.String()
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, tc.want) {
			t.Errorf("%v: stderr %q, want one line starting %q", tc.args, out, tc.want)
		}
	}
}

func TestPaysim_HelpListsTheFlags(t *testing.T) {
	t.Parallel()
	var stdout, stderr syncbuf.Buffer
	if code := run(context.Background(), []string{"--help"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, flag := range []string{"--addr", "--seed", "--latency", "--error-rate", "--drop-response-rate", "--double-charge-rate", "--state-file"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("--help lacks %s", flag)
		}
	}
}

func TestPaysim_ServesAndSavesStateOnShutdown(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan int, 1)
	var stdout, stderr syncbuf.Buffer
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--seed", "5", "--state-file", state}, &stdout, &stderr, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case code := <-done:
		t.Fatalf("exited %d before listening: %s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10s")
	}
	c := paysim.NewClient("http://"+addr, nil)
	ch, err := c.CreateCharge(ctx, "order-1", paysim.ChargeRequest{AmountMinor: 100, Currency: "CNY"}, "")
	if err != nil {
		t.Fatal(err)
	}
	cancel() // what SIGINT/SIGTERM do
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no clean shutdown within 10s")
	}
	b, err := os.ReadFile(state)
	if err != nil || !bytes.Contains(b, []byte(ch.ID)) {
		t.Fatalf("state file lacks the charge: %v", err)
	}
	if !strings.Contains(stdout.String(), "paysim stopped") {
		t.Fatalf("stdout = %q", stdout.String())
	}
}
