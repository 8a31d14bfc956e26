package templates

import (
	"context"
	"fmt"
	"time"

	"github.com/idemops/idemops/errs"
)

// Say is a run-time phrase (an error's reason, a refusal, a notice with a value in it) in the
// context's language: its format looked up in the catalog — the Chinese may put the arguments
// in another order with explicit indexes, %[2]s — and filled in with its arguments, each
// localized too: a phrase inside it, an error (its phrase, or its text looked up), a time (in
// the operator's zone, written the language's way). A format the catalog lacks stays English
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
