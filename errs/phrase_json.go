package errs

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// A Phrase is stored as JSON — a run's error kept for later pages — with each argument tagged
// by its kind, so it fills the same verbs when read back: {"f": format, "a": [{"s": "…"},
// {"i": 3}, {"t": "2026-…"}, {"p": {…}}]}. An error argument is stored as its phrase (Phrased)
// or its text, a Stringer as its String; numbers as numbers; any other value as its text
// (fmt.Sprint), which %s, %v and %q write the same.
type phraseJSON struct {
	F string    `json:"f"`
	A []argJSON `json:"a,omitempty"`
}

type argJSON struct {
	S *string    `json:"s,omitempty"`
	I *int64     `json:"i,omitempty"`
	U *uint64    `json:"u,omitempty"`
	F *float64   `json:"n,omitempty"`
	T *time.Time `json:"t,omitempty"`
	P *Phrase    `json:"p,omitempty"`
}

// MarshalJSON stores the phrase with its arguments' kinds.
func (p Phrase) MarshalJSON() ([]byte, error) {
	out := phraseJSON{F: p.Format, A: make([]argJSON, len(p.Args))}
	for i, a := range p.Args {
		switch v := a.(type) {
		case Phrase:
			out.A[i].P = &v
		case Phrased:
			ph := v.Phrasing()
			out.A[i].P = &ph
		case error:
			s := v.Error()
			out.A[i].S = &s
		case time.Time:
			out.A[i].T = &v
		case fmt.Stringer: // a duration, a typed code: its text is what the verbs write
			s := v.String()
			out.A[i].S = &s
		default:
			rv := reflect.ValueOf(a)
			switch {
			case rv.CanInt():
				n := rv.Int()
				out.A[i].I = &n
			case rv.CanUint():
				n := rv.Uint()
				out.A[i].U = &n
			case rv.CanFloat():
				n := rv.Float()
				out.A[i].F = &n
			default:
				s := fmt.Sprint(a)
				out.A[i].S = &s
			}
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a phrase MarshalJSON stored.
func (p *Phrase) UnmarshalJSON(b []byte) error {
	var in phraseJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	p.Format, p.Args = in.F, make([]any, len(in.A))
	for i, a := range in.A {
		switch {
		case a.P != nil:
			p.Args[i] = *a.P
		case a.T != nil:
			p.Args[i] = *a.T
		case a.I != nil:
			p.Args[i] = *a.I
		case a.U != nil:
			p.Args[i] = *a.U
		case a.F != nil:
			p.Args[i] = *a.F
		case a.S != nil:
			p.Args[i] = *a.S
		default:
			p.Args[i] = ""
		}
	}
	return nil
}

// NullPhrase is a phrase kept in a nullable jsonb column beside the English text it says (a
// replay's outcome, a bulk item's detail), as sql.NullString is a nullable text: Valid is false
// for NULL (rows written before the column, or by a writer that had no phrase). Read it from
// the column cast to text (col::text AS col); write it as ?::jsonb.
type NullPhrase struct {
	Phrase Phrase
	Valid  bool
}

// PhraseOf is the phrase err carries when it says text whole — the outermost Phrased error in
// err's chain, when its Error is text (err's first line, say) — to be stored beside text; not
// Valid when err carries none, or only inside more context than the phrase says.
func PhraseOf(err error, text string) NullPhrase {
	if p := (Phrased)(nil); errors.As(err, &p) && p.Error() == text {
		return Stored(p.Phrasing())
	}
	return NullPhrase{}
}

// Stored is p to be stored.
func Stored(p Phrase) NullPhrase { return NullPhrase{Phrase: p, Valid: p.Format != ""} }

// Scan reads the JSON MarshalJSON stored (text or bytes), or NULL.
func (n *NullPhrase) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*n = NullPhrase{}
		return nil
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("errs.NullPhrase: cannot scan %T", src)
	}
	var p Phrase
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("errs.NullPhrase: %w", err)
	}
	*n = NullPhrase{Phrase: p, Valid: true}
	return nil
}

// Value is the phrase's JSON as text, or NULL.
func (n NullPhrase) Value() (driver.Value, error) {
	if !n.Valid {
		return nil, nil
	}
	b, err := json.Marshal(n.Phrase)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// GormDataType tells gorm the column is jsonb (it then reads the field as one value).
func (NullPhrase) GormDataType() string { return "jsonb" }
