package demo

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/downstream/paysim"
)

// Every error of the payments API is application/problem+json with a distinct type: httpidem's
// (httpidem.Problems) and these, the service's own. GET /problems/{name} documents each.
var serviceProblems = map[string]string{
	"payment-declined":     "The channel declined the charge. This is the request's outcome: a retry with the same key replays it; a new attempt needs a new key.",
	"payment-not-found":    "No payment with this id belongs to your credential.",
	"not-found":            "No such resource or route.",
	"insufficient-balance": "A balance adjustment would debit more than the balance. This is the request's outcome: a retry with the same key replays it.",
}

// problemDoc returns the documentation of a problem type, the service's or httpidem's.
func problemDoc(name string) (string, bool) {
	if text, ok := serviceProblems[name]; ok {
		return text, true
	}
	text, ok := httpidem.Problems[name]
	return text, ok
}

func writeProblem(c *gin.Context, status int, typ, title, detail string) {
	httpidem.WriteProblem(c.Writer, httpidem.Problem{Type: "/problems/" + typ, Title: title, Status: status, Detail: detail})
	c.Abort()
}

// DeclinedPayment is the answer stored and replayed for a declined charge: 402 payment-declined
// naming the channel's charge.
func DeclinedPayment(ch *paysim.Charge) *claim.Snapshot {
	return httpidem.ProblemSnapshot(httpidem.Problem{Type: "/problems/payment-declined", Title: "Payment declined",
		Status: http.StatusPaymentRequired, Detail: "the channel declined the charge (" + ch.FailureCode + ")", ResourceID: ch.ID}, ch.ID)
}
