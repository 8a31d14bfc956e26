package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/idemops/idemops/internal/inputcheck"
)

// MaxJSONBytes bounds the report.json Read accepts (a 5-minute run's is well under 1 MiB).
const MaxJSONBytes = 64 << 20

// ErrInvalid is the kind of every error Read returns for a file that is not a report (missing,
// unreadable, too big, not JSON, not text); the CLI answers it with exit 2.
var ErrInvalid = errors.New("not a chaos report")

// Read loads a report.json written by Write, refusing NUL bytes, text that is not UTF-8 and
// anything that is not one JSON object, with a one-line reason.
func Read(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxJSONBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrInvalid, path, err)
	}
	return parse(path, raw)
}

// parse decodes the text of a report.json; name says which file in errors.
func parse(name string, raw []byte) (*Report, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, name, fmt.Sprintf(format, args...))
	}
	switch {
	case len(raw) > MaxJSONBytes:
		return nil, bad("larger than %d bytes", MaxJSONBytes)
	case len(bytes.TrimSpace(raw)) == 0:
		return nil, bad("empty")
	}
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		return nil, bad("contains a NUL byte at offset %d", i)
	}
	if err := inputcheck.JSON(raw); err != nil {
		return nil, bad("%v", err)
	}
	if raw = bytes.TrimSpace(raw); raw[0] != '{' {
		return nil, bad("not a JSON object")
	}
	var r Report
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&r); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, bad("invalid JSON at offset %d: %v", se.Offset, se)
		case errors.As(err, &te):
			return nil, bad("field %s: %v", te.Field, err)
		}
		return nil, bad("invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("text after the report's JSON object at offset %d", dec.InputOffset())
	}
	return &r, nil
}
