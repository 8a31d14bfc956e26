package templates

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"github.com/idemops/idemops/errs"
)

// Say is a run-time phrase (an error's reason, a refusal, a notice with a value in it) in the
// context's language: its format looked up in the catalog — the Chinese may put the arguments
// in another order with explicit indexes, %[2]s — and filled in with its arguments, each
// localized too: a phrase inside it, an error (its phrase, or its text looked up), a time (in
// the operator's zone, written the language's way; a duration in the language's style). A format the catalog lacks stays English
// (TestCatalog_CoversRuntimePhrases in the console keeps that from happening to the ones it
// makes). The English result is the phrase's own String, but times in the operator's zone.
func Say(ctx context.Context, p errs.Phrase) string {
	if p.Format == "" {
		return ""
	}
	args := make([]any, len(p.Args))
	for i, a := range p.Args {
		args[i] = sayArg(ctx, a)
	}
	return fmt.Sprintf(t(ctx, p.Format), args...)
}

func sayArg(ctx context.Context, a any) any {
	switch v := a.(type) {
	case errs.Phrase:
		return Say(ctx, v)
	case errs.Phrased:
		return Say(ctx, v.Phrasing())
	case error:
		return t(ctx, v.Error())
	case time.Time:
		return whenIn(ctx, v)
	case *time.Time:
		if v == nil {
			return "—"
		}
		return whenIn(ctx, *v)
	case time.Duration:
		return duration(ctx, v)
	case string:
		if minor, code, ok := displayedAmount(v); ok {
			return amountText(ctx, minor, code)
		}
	}
	return a
}

// SayText is a fixed run-time text (a notice, a sentinel's sentence) in the context's language:
// the catalog's entry, else the text itself.
func SayText(ctx context.Context, s string) string { return t(ctx, s) }

// HasMessage reports whether the catalog has an entry for the English text (a format or a
// sentence): how the console's tests check that every phrase it can show is translated.
func HasMessage(en string) bool {
	z, ok := zh[en]
	return ok && z != ""
}

// SayHTML is Say as markup, for a phrase shown in a page's text: each argument is written the
// way the page writes its kind — a phrase or an error in the language, a time as At, a duration
// in the language's style, a number as fmt writes it — and any other value (a key, an order
// number, a tenant) as data, marked translate="no" (it is not a word of the page's language).
func SayHTML(p errs.Phrase) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		if p.Format == "" {
			return nil
		}
		s, next := t(ctx, p.Format), 0
		var b strings.Builder
		for {
			i := strings.IndexByte(s, '%')
			if i < 0 {
				b.WriteString(templ.EscapeString(s))
				break
			}
			b.WriteString(templ.EscapeString(s[:i]))
			s = s[i+1:]
			if strings.HasPrefix(s, "%") {
				b.WriteByte('%')
				s = s[1:]
				continue
			}
			// flags, width and precision, an explicit argument index, the verb.
			j := 0
			for j < len(s) && strings.IndexByte("+-# 0123456789.", s[j]) >= 0 {
				j++
			}
			flags := s[:j]
			s = s[j:]
			n := next
			if strings.HasPrefix(s, "[") {
				k := strings.IndexByte(s, ']')
				idx, err := strconv.Atoi(s[1:max(k, 1)])
				if k < 0 || err != nil {
					return fmt.Errorf("phrase %q: bad argument index", p.Format)
				}
				n, s = idx-1, s[k+1:]
			}
			if s == "" || n < 0 || n >= len(p.Args) {
				return fmt.Errorf("phrase %q: verb %d of %d arguments", p.Format, n+1, len(p.Args))
			}
			verb := s[0]
			s, next = s[1:], n+1
			if err := sayHTMLArg(ctx, &b, "%"+flags+string(verb), p.Args[n]); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, b.String())
		return err
	})
}

func sayHTMLArg(ctx context.Context, b *strings.Builder, verb string, a any) error {
	var c templ.Component
	switch v := a.(type) {
	case errs.Phrase:
		if len(v.Args) == 0 && !HasMessage(v.Format) {
			// A fixed text the catalog does not know (an operation's noun, an error from
			// below) is no word of the page: data.
			b.WriteString(`<span translate="no">` + templ.EscapeString(strings.ReplaceAll(v.Format, "%%", "%")) + `</span>`)
			return nil
		}
		c = SayHTML(v)
	case errs.Phrased:
		c = SayHTML(v.Phrasing())
	case error:
		b.WriteString(templ.EscapeString(t(ctx, v.Error())))
		return nil
	case time.Time:
		c = At(v)
	case *time.Time:
		c = AtP(v)
	case time.Duration:
		c = Took(v)
	case int, int64, int32, uint, uint64, float64:
		b.WriteString(templ.EscapeString(fmt.Sprintf(verb, v)))
		return nil
	case string:
		if minor, code, ok := displayedAmount(v); ok {
			c = Money(minor, code)
			break
		}
		b.WriteString(`<span translate="no">` + templ.EscapeString(fmt.Sprintf(verb, v)) + `</span>`)
		return nil
	default:
		b.WriteString(`<span translate="no">` + templ.EscapeString(fmt.Sprintf(verb, v)) + `</span>`)
		return nil
	}
	return c.Render(ctx, b)
}
