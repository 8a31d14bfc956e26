package httpidem

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
)

// StatusDoc answers a status lookup: where the caller's key stands and, once it has an answer,
// the answer a replay gives (Response).
type StatusDoc struct {
	Operation string `json:"operation"`
	// State is processing, completed, failed_retryable (the next retry executes) or failed_final.
	State string `json:"state"`
	// Held: the attempt failed with an unknown outcome; Response is replayed until an operator
	// releases the key or marks it final.
	Held bool `json:"held,omitempty"`
	// ResultExpired: the stored answer is gone (retention); a retry answers 410.
	ResultExpired     bool            `json:"result_expired,omitempty"`
	ResourceID        string          `json:"resource_id,omitempty"`
	RetryAfterSeconds int             `json:"retry_after_seconds,omitempty"`
	Response          *StatusResponse `json:"response,omitempty"`
}

// StatusResponse is a stored answer: status, the replayed headers and the body (as JSON when it
// is JSON, else as text in BodyText).
type StatusResponse struct {
	Status   int               `json:"status"`
	Headers  map[string]string `json:"headers,omitempty"`
	Body     json.RawMessage   `json:"body,omitempty"`
	BodyText string            `json:"body_text,omitempty"`
}

// statusURL is where the status of keys of operation is asked (with the key in the header).
func statusURL(cfg Config, operation string) string {
	return cfg.StatusPath + "?operation=" + url.QueryEscape(operation)
}

// StatusHandler answers GET {StatusPath}?operation=OP with the Idempotency-Key header (never in
// the URL, so that access logs do not collect keys) for the authenticated caller
// (Config.TenantFromRequest): 200 with a StatusDoc, 404 key-not-found for a key that does not
// exist — or belongs to another tenant, indistinguishably.
func StatusHandler(cfg Config) http.Handler {
	cfg = cfg.withDefaults()
	tenant := cfg.requestTenant()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveStatus(w, r, cfg, tenant) })
}

// Status is StatusHandler for gin.
func Status(cfg Config) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		serveStatus(c.Writer, c.Request, cfg, ginTenant(cfg, c))
		c.Abort()
	}
}

func serveStatus(w http.ResponseWriter, r *http.Request, cfg Config, tenant tenantFunc) {
	t, err := tenant(r)
	if err != nil || t == "" {
		writeProblem(w, cfg, http.StatusUnauthorized, "unauthenticated", "Not authenticated", "a valid credential is required", nil)
		return
	}
	cfg, ok := cfg.forTenant(w, r, t)
	if !ok {
		return
	}
	op := r.URL.Query().Get("operation")
	if op == "" {
		writeProblemDoc(w, Problem{Type: cfg.ProblemBase + "invalid-field", Title: "Invalid request parameter",
			Status: http.StatusBadRequest, Detail: "operation: the query parameter is required", Field: "operation"})
		return
	}
	key, err := parseKeyHeader(r.Header.Values(HeaderKey))
	if err == nil && key == "" {
		err = errors.New("send the key to look up in the Idempotency-Key header")
	}
	if err != nil {
		writeProblem(w, cfg, http.StatusBadRequest, "key-malformed", "Malformed Idempotency-Key", err.Error(), nil)
		return
	}
	st, err := cfg.Store.StatusOf(r.Context(), t, op, key)
	switch {
	case errors.Is(err, claim.ErrNotFound):
		writeProblem(w, cfg, http.StatusNotFound, "key-not-found", "Key not found",
			"no request with this Idempotency-Key for this operation is known for your credential", nil)
		return
	case errors.Is(err, claim.ErrInvalidScope):
		writeProblemDoc(w, Problem{Type: cfg.ProblemBase + "invalid-field", Title: "Invalid request parameter",
			Status: http.StatusBadRequest, Detail: err.Error(), Field: "operation"})
		return
	case err != nil:
		writeError(w, r, cfg, err)
		return
	}
	doc := StatusDoc{Operation: op, State: string(st.State), Held: st.Held, ResultExpired: st.ResultExpired, ResourceID: st.ResourceID}
	if st.State == claim.StateProcessing {
		doc.RetryAfterSeconds = int(math.Ceil(st.RetryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(doc.RetryAfterSeconds))
	}
	if st.Snapshot != nil {
		doc.Response = &StatusResponse{Status: st.Snapshot.Status, Headers: st.Snapshot.Headers}
		if json.Valid(st.Snapshot.Body) {
			doc.Response.Body = st.Snapshot.Body
		} else {
			doc.Response.BodyText = string(st.Snapshot.Body)
		}
	}
	b, _ := json.Marshal(doc)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
