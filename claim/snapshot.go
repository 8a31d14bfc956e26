package claim

import (
	"encoding/json"
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
