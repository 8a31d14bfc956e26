package claim

import (
	"encoding/json"
	"fmt"
	"net/http"
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
	h := http.Header{}
	for k, v := range s.Headers {
		h.Set(k, v)
	}
	c.Headers = SnapshotHeaders(h)
	return &c
}

func (s *Snapshot) headersJSON() []byte {
	b, _ := json.Marshal(s.Headers)
	return b
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
