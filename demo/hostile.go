package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/idemops/idemops/claim/httpidem"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
)

// refuseHostileText answers 400 invalid-field before any route runs when the path or a query
// parameter holds a NUL byte or bytes that are not UTF-8 (PostgreSQL would refuse them as a
// 500). JSON bodies are checked by decodeBody, before anything is claimed.
func refuseHostileText(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := inputcheck.Text("path", r.URL.Path)
		if err == nil {
			err = inputcheck.Values(r.URL.Query())
		}
		var ie *errs.FieldError
		if errors.As(err, &ie) {
			b, _ := json.Marshal(httpidem.Problem{Type: "/problems/invalid-field", Title: "Invalid request parameter",
				Status: http.StatusBadRequest, Detail: ie.Error(), Field: ie.Name})
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(b)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decodeBody is where a body's validation starts (validateCharge, validateAdjustment): hostile
// text refused naming its field (refuseHostileJSON), then raw decoded into into with numbers as
// json.Number; a body that is not such an object is refused naming the fields it must have.
func decodeBody(raw []byte, into any, fields string) error {
	if err := refuseHostileJSON(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		return httpidem.Refuse("", "the body must be a JSON object with "+fields)
	}
	return nil
}

// refuseHostileJSON is decodeBody's first check: a string or member name of the body with a
// NUL byte or bytes that are not UTF-8 is refused naming its field.
func refuseHostileJSON(raw []byte) error {
	var ie *errs.FieldError
	if errors.As(inputcheck.JSON(raw), &ie) {
		return httpidem.Refuse(ie.Name, ie.Why.String())
	}
	return nil
}
