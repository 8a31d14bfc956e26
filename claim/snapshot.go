package claim

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
)

// replayedHeaders is the allow-list of response headers a snapshot keeps. Never Set-Cookie: a
// replay must not hand one client's session to another request.
var replayedHeaders = []string{"Content-Type", "Location"}

// Snapshot is what a completed key answers to later requests: the response as it was at
// creation, limited to what the client needs, plus the resource id for later queries.
type Snapshot struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       []byte            `json:"body,omitempty"`
	ResourceID string            `json:"resource_id,omitempty"`
}

// SnapshotHeaders keeps the allow-listed headers of h.
func SnapshotHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for _, name := range replayedHeaders {
		if v := h.Get(name); v != "" {
			out[name] = v
		}
	}
	return out
}

// filtered returns s with only allow-listed headers (whatever the caller put in).
func (s *Snapshot) filtered() *Snapshot {
	c := *s
	if !allowedAsIs(s.Headers) {
		h := http.Header{}
		for k, v := range s.Headers {
			h.Set(k, v)
		}
		c.Headers = SnapshotHeaders(h)
	}
	return &c
}

// allowedAsIs says whether every header is allow-listed under its canonical name, with a value:
// what SnapshotHeaders would keep of it is all of it (the usual snapshot, built from
// SnapshotHeaders or a literal Content-Type), so filtering need not copy it.
func allowedAsIs(h map[string]string) bool {
	for k, v := range h {
		if v == "" || !slices.Contains(replayedHeaders, k) {
			return false
		}
	}
	return true
}

// headersJSON is the headers as a JSON object, keys sorted (as encoding/json writes a map).
func (s *Snapshot) headersJSON() []byte {
	keys := make([]string, 0, len(replayedHeaders))
	for k := range s.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, s.Headers[k])
	}
	return append(b, '}')
}

// JSON is a JSON document read from a json/jsonb column.
type JSON []byte

// Scan implements sql.Scanner for text and binary column values.
func (j *JSON) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*j = nil
	case string:
		*j = append((*j)[:0], v...)
	case []byte:
		*j = append((*j)[:0], v...)
	default:
		return fmt.Errorf("claim.JSON: cannot scan %T", src)
	}
	return nil
}

// MarshalJSON emits the document as is (null when empty).
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}
