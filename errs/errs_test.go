package errs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemops/idemops/errs"
)

// fieldError is a package's typed error: it names its kind and its text is the message.
type fieldError struct{ field string }

func (e *fieldError) Error() string        { return e.field + ": required" }
func (e *fieldError) Unwrap() error        { return errInvalid }
func (e *fieldError) ErrorKind() errs.Kind { return errs.Invalid }

var (
	errInvalid   = errs.New(errs.Invalid, "invalid")
	errNotFound  = errs.New(errs.NotFound, "idempotency key not found")
	errClosed    = errs.New(errs.Conflict, "finding already closed")
	errForbidden = errs.Sentence(errs.Forbidden, "not allowed for your role")
)

func TestKinds_OneTableDecidesStatusTypeExitAndMessage(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		kind    errs.Kind
		status  int
		exit    int
		message string
	}{
		{"a sentinel shows its context", fmt.Errorf("%w: cron_spec: 6 fields", errInvalid), errs.Invalid, 400, 2, "invalid: cron_spec: 6 fields"},
		{"a sentinel wrapped by a caller", fmt.Errorf("finding 4: %w", errClosed), errs.Conflict, 409, 2, "finding 4: finding already closed"},
		{"a typed error is shown alone", fmt.Errorf("save: %w", &fieldError{"reason"}), errs.Invalid, 400, 2, "reason: required"},
		{"a sentence is shown alone", fmt.Errorf("role viewer: %w", errForbidden), errs.Forbidden, 403, 1, "not allowed for your role"},
		{"not found never says what was missing", fmt.Errorf("key 7: %w", errNotFound), errs.NotFound, 404, 2, "not found"},
		{"the outermost kind wins", fmt.Errorf("%w: %w", errNotFound, errInvalid), errs.NotFound, 404, 2, "not found"},
		{"an unclassified error is internal", fmt.Errorf("query: %w", context.DeadlineExceeded), errs.Internal, 500, 1, "Something went wrong on our side. The error was logged."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errs.KindOf(tt.err); got != tt.kind {
				t.Errorf("KindOf = %v; want %v", got, tt.kind)
			}
			if got := errs.Status(tt.err); got != tt.status {
				t.Errorf("Status = %d; want %d", got, tt.status)
			}
			if got := errs.Exit(tt.err); got != tt.exit {
				t.Errorf("Exit = %d; want %d", got, tt.exit)
			}
			if got := errs.Message(tt.err); got != tt.message {
				t.Errorf("Message = %q; want %q", got, tt.message)
			}
		})
	}
}

func TestKinds_SentinelsStayComparable(t *testing.T) {
	err := fmt.Errorf("x: %w", &fieldError{"y"})
	if !errors.Is(err, errInvalid) || errors.Is(err, errClosed) {
		t.Error("errors.Is must see the sentinel a typed error wraps, and only it")
	}
	if errs.Status(nil) != http.StatusOK || errs.Exit(nil) != 0 || errs.Message(nil) != "" {
		t.Error("nil is success")
	}
}

func TestKinds_EveryKindHasANameStatusAndExit(t *testing.T) {
	seen := map[string]bool{}
	for k := errs.Internal; k <= errs.Unavailable; k++ {
		if k.String() == "" || seen[k.String()] || k.Status() < 400 || (k.Exit() != 1 && k.Exit() != 2) {
			t.Errorf("kind %d: type %q, status %d, exit %d", k, k, k.Status(), k.Exit())
		}
		seen[k.String()] = true
	}
	if k := errs.Kind(200); k.Status() != 500 || k.String() != "internal" {
		t.Errorf("an unknown kind is internal, got %v %d", k, k.Status())
	}
}

// errs.Errorf is fmt.Errorf to everything but a translator: the same text, kind and chain, and
// a phrase whose format reads %w as %s, the sentinel an argument of its own.
func TestErrorf_IsFmtErrorfWithAPhrase(t *testing.T) {
	err := errs.Errorf("finding %d is %s: %w", 4, "resolved", errClosed)
	if want := fmt.Errorf("finding %d is %s: %w", 4, "resolved", errClosed).Error(); err.Error() != want || errs.Message(err) != want {
		t.Errorf("text %q, message %q; want %q", err.Error(), errs.Message(err), want)
	}
	if !errors.Is(err, errClosed) || errs.KindOf(err) != errs.Conflict {
		t.Errorf("the chain lost its sentinel: kind %v", errs.KindOf(err))
	}
	var p errs.Phrased
	if !errors.As(err, &p) {
		t.Fatal("errs.Errorf is not Phrased")
	}
	ph := p.Phrasing()
	if ph.Format != "finding %d is %s: %s" || len(ph.Args) != 3 || fmt.Sprint(ph.Args[2]) != "finding already closed" {
		t.Errorf("phrase = %#v", ph)
	}
	if ph.String() != err.Error() {
		t.Errorf("the phrase says %q, the error %q", ph.String(), err.Error())
	}
	when := time.Date(2026, 12, 3, 23, 4, 5, 0, time.FixedZone("CST", 8*3600))
	if got := errs.Phrasef("parked until %s (%s)", when, errs.Phrasef("%d%%", 5)).String(); got != "parked until 2026-12-03 15:04:05Z (5%)" {
		t.Errorf("phrase with a time and a phrase = %q", got)
	}
}

// A phrase stored as JSON and read back says the same words: its arguments keep their kinds,
// so %d, %q and a time still fill in as before.
func TestPhrase_JSONRoundTripSaysTheSame(t *testing.T) {
	type state string
	when := time.Date(2026, 12, 3, 15, 4, 5, 0, time.UTC)
	line := errs.Phrasef("line %d: %s", 3, errs.Phrasef("%s: %v", "gross", &fieldError{"amount"}))
	for _, p := range []errs.Phrase{
		line,
		errs.Phrasef("%q is not a key state; %d of %d (%.1f%%) until %s, %v", state("bogus"), int32(2), uint8(9), 22.5, when, time.Minute),
		errs.Verbatim("100% fixed"),
	} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back errs.Phrase
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.String() != p.String() || back.Format != p.Format {
			t.Errorf("%s read back says %q, want %q", b, back.String(), p.String())
		}
	}
	b, _ := json.Marshal(line)
	var back errs.Phrase
	_ = json.Unmarshal(b, &back)
	if inner, ok := back.Args[1].(errs.Phrase); !ok || inner.Format != "%s: %v" {
		t.Errorf("the inner phrase came back as %#v", back.Args[1])
	}
}

// A phrase stored in a nullable column comes back saying the same; NULL and the zero phrase
// are not valid, so a reader falls back to the English text beside it.
func TestNullPhrase_StoresAndReadsBack(t *testing.T) {
	when := time.Date(2026, 12, 3, 15, 4, 5, 0, time.UTC)
	p := errs.Phrasef("sent: downstream created %s at %s after %v", "ch_1", when, time.Minute)
	v, err := errs.Stored(p).Value()
	if err != nil {
		t.Fatal(err)
	}
	s, ok := v.(string)
	if !ok {
		t.Fatalf("value %T, want the JSON as text", v)
	}
	for _, src := range []any{s, []byte(s)} {
		var back errs.NullPhrase
		if err := back.Scan(src); err != nil {
			t.Fatal(err)
		}
		if !back.Valid || back.Phrase.Format != p.Format || back.Phrase.String() != p.String() {
			t.Errorf("read back %+v, want %q", back, p.String())
		}
	}
	var null errs.NullPhrase
	if err := null.Scan(nil); err != nil || null.Valid {
		t.Errorf("NULL: %+v %v", null, err)
	}
	if v, err := errs.Stored(errs.Phrase{}).Value(); v != nil || err != nil {
		t.Errorf("the zero phrase is stored as %v %v, want NULL", v, err)
	}
	if err := null.Scan(42); err == nil {
		t.Error("an int scanned as a phrase")
	}
}

// PhraseOf keeps an error's phrase only when it says the whole text stored beside it.
func TestPhraseOf_OnlyWhenThePhraseSaysTheWholeText(t *testing.T) {
	err := errs.Errorf("finding %d is %s: %w", 7, "closed", errClosed)
	if p := errs.PhraseOf(err, err.Error()); !p.Valid || p.Phrase.Format != "finding %d is %s: %s" {
		t.Errorf("the error's own text: %+v", p)
	}
	wrapped := fmt.Errorf("resolve: %w", err)
	if p := errs.PhraseOf(wrapped, wrapped.Error()); p.Valid {
		t.Errorf("context around the phrase was kept as %+v", p)
	}
	if p := errs.PhraseOf(errors.New("plain"), "plain"); p.Valid {
		t.Errorf("an error without a phrase gave %+v", p)
	}
}
