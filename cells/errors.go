package cells

import (
	"fmt"
	"time"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
)

// ErrInvalidMap is the kind of every refusal of a map file: bad input, the CLI exits 2.
var ErrInvalidMap = errs.New(errs.Invalid, "invalid cell map")

// ErrNoCell means the map puts the tenant in no cell: its requests are refused (unavailable),
// never routed to a default cell.
var ErrNoCell = errs.New(errs.Unavailable, "tenant has no cell")

// MapError is one refusal of a map file: the file, the line (0 when the file as a whole is
// wrong), the field (cells.a.tenants) and the problem. Nothing of a refused map is used.
type MapError struct {
	File    string
	Line    int
	Field   string
	Problem string
	tenant  string // the tenant a refusal is about, to find its line
}

func (e *MapError) Error() string {
	s := e.Problem
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	switch {
	case e.File != "" && e.Line > 0:
		s = fmt.Sprintf("%s:%d: %s", e.File, e.Line, s)
	case e.File != "":
		s = e.File + ": " + s
	}
	return s
}

func (e *MapError) Unwrap() error { return ErrInvalidMap }

// ErrorKind is invalid: the message names what to fix.
func (e *MapError) ErrorKind() errs.Kind { return errs.Invalid }

// NoCellError is ErrNoCell for one tenant.
type NoCellError struct{ Tenant string }

func (e *NoCellError) Error() string {
	return fmt.Sprintf("tenant %q has no cell in the cell map", e.Tenant)
}

func (e *NoCellError) Unwrap() error { return ErrNoCell }

// ErrorKind is unavailable (503): the deployment, not the caller, is missing something.
func (e *NoCellError) ErrorKind() errs.Kind { return errs.Unavailable }

// CellDownError is a cell not reached (or refused by its checks) since the process started
// (Open): its tenants are answered as in a failover — claim.Unreachable, so 503 with
// Retry-After, gRPC Unavailable — while the set keeps trying to reach it.
type CellDownError struct {
	Cell  string
	Since time.Time // when the process first tried it
	Err   error     // why it is not in use, the last attempt's
}

func (e *CellDownError) Error() string {
	return fmt.Sprintf("cell %s is unavailable (not reached since %s): %v", e.Cell, e.Since.UTC().Format(time.RFC3339), e.Err)
}

func (e *CellDownError) Unwrap() []error { return []error{claim.ErrStoreDown, e.Err} }

// ErrorKind is unavailable (503): the same request may come back.
func (e *CellDownError) ErrorKind() errs.Kind { return errs.Unavailable }
