package errs

import (
	"encoding/json"
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
