package claim

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// maxSummaryValue bounds one summary value as shown (a declared field could hold a long text).
const maxSummaryValue = 200

// SummaryField is one non-sensitive request field of a key, as the operation declared it.
type SummaryField struct {
	Path  string // the declared dotted path ("payee", "order.number")
	Value string // a string as is, any other JSON value in its compact JSON form
}

// SummaryOf reads the fields spec.Summary declares from a stored request, in declared order;
// a declared field the request does not hold is left out. A request that is not a JSON object
// has no summary.
func (spec IntentSpec) SummaryOf(request []byte) []SummaryField {
	if len(spec.Summary) == 0 || len(request) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(request))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil
	}
	var out []SummaryField
	for _, path := range spec.Summary {
		v, ok := lookupPath(obj, path)
		if !ok || v == nil {
			continue
		}
		var text string
		switch t := v.(type) {
		case string:
			text = t
		default:
			b, err := json.Marshal(t)
			if err != nil {
				continue
			}
			text = string(b)
		}
		out = append(out, SummaryField{Path: path, Value: truncateRunes(text, maxSummaryValue)})
	}
	return out
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
