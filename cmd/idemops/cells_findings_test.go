package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFindingsListWithCells_PagesThroughEveryCell: `findings list --cells` pages through the
// findings of every cell, newest first across them (by created_at), each finding once: a page
// that is not the last says how to go on (--before with the position in every cell), and the
// pages together are every cell's findings.
func TestFindingsListWithCells_PagesThroughEveryCell(t *testing.T) {
	t.Parallel()
	secret := []byte("cells-cmds-secret-0123")
	dir := dataDirWithSecret(t, secret)
	_, mapPath := twoCellMap(t, dir)
	_, dbs := openTestCells(t, mapPath, secret)
	// Cell a's findings at minutes 0, 2, 4, 6, 8; cell b's at 1, 3, 5, 7: the newest of all
	// alternate between the cells (ids do not: each cell has its own range).
	var want []string // subjects, newest first
	for minute := 8; minute >= 0; minute-- {
		want = append(want, fmt.Sprintf("txn:%d", minute))
	}
	for name, minutes := range map[string][]int{"a": {0, 2, 4, 6, 8}, "b": {1, 3, 5, 7}} {
		db := dbs[name]
		var run int64
		if err := db.Raw(`INSERT INTO recon_runs (channel, bill_date, status, actor, rows_parsed, rows_loaded, rows_matched, counts, finished_at)
			VALUES ('stripe', '2024-03-01', 'succeeded', 'daemon', 1, 1, 0, '{}', now()) RETURNING id`).Scan(&run).Error; err != nil {
			t.Fatal(err)
		}
		for _, m := range minutes {
			if err := db.Exec(`INSERT INTO discrepancies (run_id, first_run_id, channel, bill_date, kind, subject, created_at)
				VALUES (?, ?, 'stripe', '2024-03-01', 'CHANNEL_ONLY', ?, timestamptz '2024-03-02 10:00Z' + ? * interval '1 minute')`,
				run, run, fmt.Sprintf("txn:%d", m), m).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	more := regexp.MustCompile(`more: add --before (\S+)`)
	subject := regexp.MustCompile(`txn:\d+`)
	var got []string
	before := ""
	for page := 1; ; page++ {
		if page > 10 {
			t.Fatalf("still paging after 10 pages of 2: %v", got)
		}
		args := []string{"findings", "list", "--cells", mapPath, "--data-dir", dir, "--limit", "2"}
		if before != "" {
			args = append(args, "--before", before)
		}
		out, errOut, err := runIdemopsBoth(args...)
		if err != nil {
			t.Fatalf("page %d (%v): %v\n%s", page, args, err, errOut)
		}
		rows := subject.FindAllString(out, -1)
		got = append(got, rows...)
		m := more.FindStringSubmatch(errOut)
		if m == nil {
			break
		}
		if len(rows) != 2 {
			t.Errorf("page %d: %v, want 2 findings on a page that is not the last", page, rows)
		}
		before = m[1]
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages through both cells: %v\nwant every finding once, newest first: %v", got, want)
	}
	// A bad cursor is refused as bad input (exit 2), naming the flag.
	if _, errOut, err := runIdemopsBoth("findings", "list", "--cells", mapPath, "--data-dir", dir, "--before", "a:x"); err == nil || exitCode(err) != 2 {
		t.Errorf("--before a:x: %v (exit %d), want refused with exit 2\n%s", err, exitCode(err), errOut)
	}
}

// runIdemopsBoth runs the command in-process and returns its stdout, its stderr and the error
// main would print.
func runIdemopsBoth(args ...string) (stdout, stderr string, err error) {
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = execute(context.Background(), root)
	return out.String(), strings.TrimSpace(errOut.String()), err
}
