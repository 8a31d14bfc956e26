// Package prometheus_test checks the alert rules shipped in this folder.
package prometheus_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAlerts_PromtoolChecksAndUnitTests runs promtool (Debian's prometheus package, which
// `make prereqs` installs) on alerts.yml: `check rules`, then the unit tests of alerts_test.yml,
// where every alert fires on the series that should page someone and stays quiet on a healthy
// deployment. Every metric an alert reads is one idemops exports, and every runbook link names
// a section of docs/OPERATIONS.md.
func TestAlerts_PromtoolChecksAndUnitTests(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (Debian: apt-get install prometheus; make prereqs installs it): %v", err)
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	source := exportedText(t, "../..")
	for _, name := range uniq(regexp.MustCompile(`\bidemops_[a-z_]+\b`).FindAllString(string(rules), -1)) {
		if !exported(source, name) {
			t.Errorf("alerts.yml reads %s, which no idemops code exports", name)
		}
	}
	ops, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(ops), -1) {
		anchors[anchor(m[1])] = true
	}
	links := regexp.MustCompile(`runbook_url: "docs/OPERATIONS\.md#([a-z0-9-]+)"`).FindAllStringSubmatch(string(rules), -1)
	if alerts := strings.Count(string(rules), "- alert: "); len(links) != alerts {
		t.Errorf("%d alerts, %d runbook links into docs/OPERATIONS.md: every alert needs one", alerts, len(links))
	}
	for _, l := range links {
		if !anchors[l[1]] {
			t.Errorf("runbook link #%s: no such section in docs/OPERATIONS.md", l[1])
		}
	}
}

// exportedText is the non-test Go source of the module, where metrics are declared.
func exportedText(t *testing.T, root string) string {
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		b.Write(src)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// exported: the metric's full name is in the source, or it is declared with a namespace and a
// subsystem (idemops_daemon_is_leader: Subsystem "daemon", Name "is_leader").
func exported(source, name string) bool {
	if strings.Contains(source, `"`+name+`"`) {
		return true
	}
	rest := strings.TrimPrefix(name, "idemops_")
	sub, short, ok := strings.Cut(rest, "_")
	return ok && regexp.MustCompile(`Subsystem: "`+sub+`", Name: "`+short+`"`).MatchString(source)
}

// anchor is a heading's GitHub anchor: lower case, spaces to dashes, punctuation dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func uniq(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
