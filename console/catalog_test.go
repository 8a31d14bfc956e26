package console

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/replay"
	"github.com/idemops/idemops/templates"
)

// phraseMakers are the functions whose format argument becomes a phrase a console page can
// show (pageMessage, say, templates.Say), per package, with the index of that argument.
var phraseMakers = map[string]map[string]int{
	".":            {"inputErr": 1, "refused": 0, "refuse": 0, "say": 1, "errs.Phrasef": 0, "errs.Errorf": 0, "errs.Fieldf": 1, "errs.Refusedf": 0},
	"../access":    {"fieldErr": 1, "refused": 0, "ssoRefused": 0, "errs.Phrasef": 0, "errs.Errorf": 0, "errs.Fieldf": 1, "errs.Refusedf": 0},
	"../replay":    {"inputErr": 1, "refused": 0, "errs.Phrasef": 0, "errs.Errorf": 0, "errs.Fieldf": 1, "errs.Refusedf": 0},
	"../retention": {"inputErr": 2, "errs.Errorf": 0},
	"../reconcile": {"lineErrorf": 1, "invalidf": 1, "errs.Phrasef": 0, "errs.Errorf": 0},
	"../claim":     {"errs.Phrasef": 0, "errs.Errorf": 0},
	"../daemon":    {"errs.Phrasef": 0, "errs.Errorf": 0},
	"../money":     {"parseErr": 0},
}

// Every phrase the console can show at run time — a field's or a statement line's error, a
// refusal, a notice naming a value — has a zh-CN entry: the formats handed to the phrase makers
// in the console and the packages whose errors it shows, read from their sources. A format
// that is not a literal fails too, since it could not be checked.
func TestCatalog_CoversRuntimePhrases(t *testing.T) {
	found := 0
	for dir, makers := range phraseMakers {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				i, ok := makers[callName(c)]
				if !ok || len(c.Args) <= i {
					return true
				}
				if id, ok := c.Args[i].(*ast.Ident); ok && id.Name == "format" {
					return true // the maker's own definition passing its parameter on
				}
				s, ok := stringLit(c.Args[i])
				if !ok {
					t.Errorf("%s: the format of %s is not a literal, so its translation cannot be checked", fset.Position(c.Pos()), callName(c))
					return true
				}
				found++
				s = strings.ReplaceAll(s, "%w", "%s") // errs.Errorf's phrase
				if !templates.HasMessage(s) {
					t.Errorf("%s: %q has no zh-CN catalog entry", fset.Position(c.Pos()), s)
				}
				return true
			})
		}
	}
	if found < 150 {
		t.Fatalf("found only %d run-time phrases; the scan is broken", found)
	}
}

func callName(c *ast.CallExpr) string {
	switch fn := c.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok {
			return x.Name + "." + fn.Sel.Name
		}
	}
	return ""
}

// stringLit is a string literal, or a sum of them ("…" + "…").
func stringLit(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.BinaryExpr:
		a, ok1 := stringLit(e.X)
		b, ok2 := stringLit(e.Y)
		return a + b, ok1 && ok2 && e.Op == token.ADD
	}
	return "", false
}

// Every fixed text the console shows at run time — the notices of its redirects, the labels of
// replay predictions and results, the sentences of its errors and of the errors it shows from
// other packages — has a zh-CN entry.
func TestCatalog_CoversRuntimeTexts(t *testing.T) {
	tables := map[string]map[string]string{"notices": notices, "jobsNotices": jobsNotices, "reconNotices": reconNotices,
		"findingNotices": findingNotices, "retentionNotices": retentionNotices, "predictionLabels": predictionLabels,
		"resultLabels": resultLabels, "bulkNotices": bulkNotices}
	for name, table := range tables {
		for k, text := range table {
			if !templates.HasMessage(text) {
				t.Errorf("%s[%q] = %q has no zh-CN catalog entry", name, k, text)
			}
		}
	}
	// The reasons' labels (their forms list them), the labels of the codes the system writes,
	// and the actions' names.
	for _, action := range []string{reconcile.ActionResolve, reconcile.ActionIgnore, reconcile.ActionRecover, reconcile.ActionReopen} {
		if !templates.HasMessage(action) {
			t.Errorf("the finding action %q has no zh-CN catalog entry", action)
		}
		for _, r := range reconcile.Reasons(action) {
			if !templates.HasMessage(r.Label) {
				t.Errorf("the %s reason %q (%s) has no zh-CN catalog entry", action, r.Label, r.Code)
			}
		}
	}
	for _, code := range []string{"not_found_again", "recovered", "ignored"} {
		if l := reconcile.ReasonLabel(code); l == "" || !templates.HasMessage(l) {
			t.Errorf("the reason code %q's label %q has no zh-CN catalog entry", code, l)
		}
	}
	for _, col := range exportColumns {
		if !templates.HasMessage(col) {
			t.Errorf("the export column %q has no zh-CN catalog entry", col)
		}
	}
	// The dashboard's attention cards and a bulk run's states and results.
	for _, word := range []string{"open findings", "failed retryable", "keys needing recovery", "expired leases", "failed jobs",
		"bulk runs awaiting approval", "pending_approval", "rejected", "resolved", "ignored", "recovered", "skipped"} {
		if !templates.HasMessage(word) {
			t.Errorf("%q has no zh-CN catalog entry", word)
		}
	}
	for _, err := range []error{access.ErrUnauthenticated, ErrForbidden, access.ErrCSRF, ErrNotFound, access.ErrThrottled, access.ErrBadCredentials,
		access.ErrConflict, ErrTooLarge, errs.New(errs.Internal, "x"), claim.ErrKeyChanged, replay.ErrNotFound,
		reconcile.ErrInvalid, reconcile.ErrClosed, reconcile.ErrNotClosed, reconcile.ErrCannotRecover, reconcile.ErrTooLarge,
		fmt.Errorf("read: %w", io.ErrUnexpectedEOF) /* the database went away: errs' unreachable sentence */} {
		if msg := publicMessage(err); !templates.HasMessage(msg) {
			t.Errorf("the public message %q of %v has no zh-CN catalog entry", msg, err)
		}
	}
	// The states and statuses pages show as words (their CHECK constraints in migrations/):
	// replay requests, bulk replays, daemon job runs and their triggers, retention purges.
	for _, word := range []string{"pending", "approved", "executing", "executed", "refused", "failed",
		"previewed", "running", "waiting", "done", "cancelled", "succeeded", "abandoned", "timed_out",
		daemon.TriggerSchedule, daemon.TriggerRunNow, daemon.TriggerCLI, "ok", "stopped"} {
		if !templates.HasMessage(word) {
			t.Errorf("the state %q has no zh-CN catalog entry", word)
		}
	}
	// A replay's stored outcome names the key's state and, failing a better word, what the run
	// did (errs.Verbatim arguments, looked up whole when said).
	for _, word := range []string{string(claim.StateProcessing), string(claim.StateCompleted),
		string(claim.StateFailedRetryable), string(claim.StateFailedFinal), string(claim.Recovered)} {
		if !templates.HasMessage(word) {
			t.Errorf("the key state or run outcome %q has no zh-CN catalog entry", word)
		}
	}
	// A job run's error the daemon writes itself is looked up whole on the jobs pages.
	for _, text := range []string{daemon.ErrTextEarlierLeader, daemon.ErrTextPastDeadline, daemon.ErrStopped.Error()} {
		if !templates.HasMessage(text) {
			t.Errorf("the job run error %q has no zh-CN catalog entry", text)
		}
	}
	for _, bad := range []string{"a\x00b", "\xff"} {
		if p := inputcheck.Problem(bad); !templates.HasMessage(p) {
			t.Errorf("inputcheck's %q has no zh-CN catalog entry", p)
		}
	}
}
