package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/internal/testinfra/pgtest"
)

const auditTestSecret = "an audit test secret of enough length"

func TestAuditVerify_BadFlagsExit2WithOneLine(t *testing.T) {
	t.Parallel()
	hash := strings.Repeat("0f", 32)
	for _, tc := range []struct{ args []string }{
		{[]string{"--expect-head", "nonsense"}},
		{[]string{"--expect-head", "12"}},
		{[]string{"--expect-head", "0:" + hash}},
		{[]string{"--expect-head", "12:" + hash[:60]}},
		{[]string{"--expect-head", "12:" + strings.Repeat("zz", 32)}},
		{[]string{"--expect-min-seq", "0"}},
		{[]string{"--expect-min-seq", "ten"}},
	} {
		_, err := runIdemops(t, append([]string{"audit", "verify"}, tc.args...)...)
		if err == nil || exitCode(err) != 2 || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tc.args[0]+":") {
			t.Errorf("%v: %v; want exit 2 naming the flag, one line", tc.args, err)
		}
	}
}

func TestAuditVerify_PrintsTheHeadAndChecksItBack(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := pgtest.Open(t, url)
	chain := audit.New(db, []byte(auditTestSecret))
	for i := 0; i < 4; i++ {
		if err := chain.Append(context.Background(), nil, audit.Entry{Actor: "cli:test", Action: "test.action", Target: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		return runIdemops(t, append([]string{"audit", "verify", "--database-url", url, "--digest-secret", auditTestSecret}, args...)...)
	}
	out, err := run()
	if err != nil || !strings.Contains(out, "audit log intact: 4 rows") || !strings.Contains(out, "not verified: no checkpoint given") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	var seq int64
	var hash string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "audit head ") {
			fmt.Sscanf(line, "audit head seq=%d hash=%s", &seq, &hash)
		}
	}
	if seq != 4 || len(hash) != 64 {
		t.Fatalf("no head line in:\n%s", out)
	}
	if out, err := run("--expect-head", fmt.Sprintf("%d:%s", seq, hash)); err != nil || strings.Contains(out, "not verified") {
		t.Errorf("--expect-head of the head: %v\n%s", err, out)
	}
	if _, err := run("--expect-min-seq", "5"); err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "newest rows were deleted") {
		t.Errorf("--expect-min-seq past the head: %v", err)
	}
	if _, err := runIdemops(t, "audit", "verify", "--database-url", url, "--digest-secret", "another secret of enough length"); err == nil ||
		!strings.Contains(err.Error(), "broken at row 1") {
		t.Errorf("verify under another secret: %v", err)
	}

	// The daemon's periodic line, and its resumption from the head it logged.
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	g := newAuditGauges(prometheus.NewRegistry(), logger)
	head := logAuditHead(context.Background(), chain, logger, nil, g)
	if head == nil || head.Seq != 4 || !strings.Contains(log.String(), fmt.Sprintf(`msg="audit head" seq=4 hash=%s`, hash)) {
		t.Fatalf("daemon log: %q", log.String())
	}
	if v := testutil.ToFloat64(g.verified); v < float64(time.Now().Add(-time.Minute).Unix()) || testutil.ToFloat64(g.broken) != 0 {
		t.Errorf("after an intact verification: verified at %v, broken %v", v, testutil.ToFloat64(g.broken))
	}
	_ = chain.Append(context.Background(), nil, audit.Entry{Actor: "cli:test", Action: "test.action"})
	if head = logAuditHead(context.Background(), chain, logger, head, g); head.Seq != 5 {
		t.Errorf("resumed head %v", head)
	}
	// Under another secret every seal is wrong: the chain reads as broken, for the alert.
	logAuditHead(context.Background(), audit.New(db, []byte("another secret of enough length")), logger, nil, g)
	if testutil.ToFloat64(g.broken) != 1 {
		t.Errorf("a broken chain leaves idemops_audit_chain_broken at %v", testutil.ToFloat64(g.broken))
	}
}

func TestFlags_HostileTextExits2NamingTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "verify", "--database-url", "postgres://x\x00"}, "--database-url: contains a NUL byte"},
		{[]string{"reconcile", "jobs", "add", "--name", "da\xffily", "--channel", "wechat"}, "--name: is not valid UTF-8"},
		{[]string{"user", "add", "bo\x00b", "--tenants", "acme"}, "argument 1: contains a NUL byte"},
	} {
		_, err := runIdemops(t, tc.args...)
		if err == nil || exitCode(err) != 2 || err.Error() != tc.want {
			t.Errorf("%q: %v; want exit 2 with %q", tc.args, err, tc.want)
		}
	}
}
