package httpidem

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
)

// Refusal is a refusal before execution: a parameter is invalid (or the caller may not, or is
// over quota), so nothing began executing and nothing is stored under the key — the same key
// with a corrected request executes (Stripe: "no API endpoint began execution; it is safe to
// retry"). A refusal that is the business outcome (a declined card) is not a Refusal: it fails
// the key finally and is replayed.
type Refusal struct {
	// Field names the offending request field ("amount_minor"); empty when none applies.
	Field  string
	Reason string
	// Status is the answer's status (default 400).
	Status int
}

func (r *Refusal) Error() string {
	if r.Field == "" {
		return r.Reason
	}
	return r.Field + ": " + r.Reason
}

// Refuse builds a 400 Refusal naming field.
func Refuse(field, reason string) *Refusal { return &Refusal{Field: field, Reason: reason} }

// Validator checks a request body before anything is claimed; a *Refusal (or an error wrapping
// one) answers 400 problem+json naming the field, and nothing is stored under the key. Other
// errors answer 400 invalid-request.
type Validator func(body []byte) error

// RefuseRequest is for a Middleware-wrapped handler that finds the request invalid after the
// claim: it releases the claim (a first attempt leaves no record, so the same key with a
// corrected body executes) and answers problem+json of type "invalid-field" naming the field.
func RefuseRequest(c *gin.Context, r *Refusal) {
	RefuseHTTP(c.Writer, c.Request, r)
	c.Abort()
}

// RefuseHTTP is RefuseRequest for a handler wrapped with Wrap (net/http).
func RefuseHTTP(w http.ResponseWriter, req *http.Request, r *Refusal) {
	st, ok := stateFrom(req.Context())
	cfg := Config{}.withDefaults()
	if ok {
		cfg = st.cfg
		if err := ReleaseContext(req.Context(), "refused: "+r.Error()); err != nil {
			cfg.Logger.Error("releasing a refused request failed", "digest", st.lease.Digest, "err", err)
		}
	}
	writeRefusal(w, cfg, r)
}

func writeRefusal(w http.ResponseWriter, cfg Config, r *Refusal) {
	status := r.Status
	if status == 0 {
		status = http.StatusBadRequest
	}
	writeProblemDoc(w, Problem{Type: cfg.ProblemBase + "invalid-field", Title: "Invalid request parameter", Status: status,
		Detail: r.Error(), Field: r.Field})
}

// validate runs the validators; on a refusal it answers and reports false.
func validate(w http.ResponseWriter, cfg Config, body []byte, vs []Validator) bool {
	for _, v := range vs {
		err := v(body)
		if err == nil {
			continue
		}
		var r *Refusal
		if errors.As(err, &r) {
			writeRefusal(w, cfg, r)
		} else {
			writeProblem(w, cfg, http.StatusBadRequest, "invalid-request", "Invalid request", err.Error(), nil)
		}
		return false
	}
	return true
}
