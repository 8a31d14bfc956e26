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
	st, ok := c.Request.Context().Value(leaseKey{}).(*leaseState)
	cfg := Config{}.withDefaults()
	if ok {
		cfg = st.cfg
		st.done = true
		if err := cfg.Store.Release(c.Request.Context(), st.lease, "refused: "+r.Error()); err != nil {
			cfg.Logger.Error("releasing a refused request failed", "digest", st.lease.Digest, "err", err)
		}
	}
	writeRefusal(c, cfg, r)
}

func writeRefusal(c *gin.Context, cfg Config, r *Refusal) {
	status := r.Status
	if status == 0 {
		status = http.StatusBadRequest
	}
	writeProblemField(c, cfg, status, "invalid-field", "Invalid request parameter", r.Error(), r.Field)
}

// validate runs the validators; on a refusal it answers and reports false.
func validate(c *gin.Context, cfg Config, body []byte, vs []Validator) bool {
	for _, v := range vs {
		err := v(body)
		if err == nil {
			continue
		}
		var r *Refusal
		if errors.As(err, &r) {
			writeRefusal(c, cfg, r)
		} else {
			writeProblem(c, cfg, http.StatusBadRequest, "invalid-request", "Invalid request", err.Error(), nil)
		}
		return false
	}
	return true
}
