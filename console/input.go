package console

import (
	"errors"
	"fmt"
	"mime"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
)

// multipartMemory is how much of a multipart body is held in memory (gin's default); the rest of
// an upload spills to a temporary file.
const multipartMemory = 32 << 20

// checkInput is the one check of hostile input every route passes before its handler: query
// parameters and form fields (urlencoded or multipart) must be UTF-8 without NUL bytes (400
// naming the field), and a form past the body limit is 413. A path parameter names an object,
// and no object has such a name: 404, like any missing one. JSON bodies are checked where they
// are decoded (bindJSON), whatever their Content-Type says.
func checkInput(c *gin.Context) error {
	for _, p := range c.Params {
		if err := inputcheck.Text(p.Key, p.Value); err != nil {
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
	}
	if err := inputcheck.Values(c.Request.URL.Query()); err != nil {
		return err
	}
	if c.Request.Body == nil || c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead {
		return nil
	}
	ct, _, _ := mime.ParseMediaType(c.GetHeader("Content-Type"))
	var err error
	switch ct {
	case "application/x-www-form-urlencoded":
		err = c.Request.ParseForm()
	case "multipart/form-data":
		err = c.Request.ParseMultipartForm(multipartMemory)
	default:
		return nil
	}
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return errs.Errorf("body: over the %d-byte limit: %w", mbe.Limit, ErrTooLarge)
	}
	if err != nil {
		return inputErr("body", "is not a well-formed form (%s)", truncate(err.Error(), 120))
	}
	if err := inputcheck.Values(c.Request.PostForm); err != nil {
		return err
	}
	if mf := c.Request.MultipartForm; mf != nil {
		if err := inputcheck.Values(mf.Value); err != nil {
			return err
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
