package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
)

// bindJSON reads a small JSON body into v; a bad one is an input error naming the body, a
// string with a NUL byte or bytes that are not UTF-8 one naming its field, and a body past the
// limit is ErrTooLarge. Every JSON body of the API is read here.
func bindJSON(c *gin.Context, v any) error {
	raw, err := io.ReadAll(c.Request.Body)
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return errs.Errorf("body: over the %d-byte limit: %w", mbe.Limit, ErrTooLarge)
	}
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if err := inputcheck.JSON(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return inputErr("body", "must be a JSON object with the documented fields (%s)", truncate(err.Error(), 120))
	}
	return nil
}
