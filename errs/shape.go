package errs

// The two typed errors every package returns for a user to act on, declared once here (wtf's
// error.go): a field that was wrong, and a guard that refused. A package makes them with Field
// and Refused (or Fieldf and Refusedf), optionally tied to one of its own sentinels with Of so
// that errors.Is still finds it; the edges read the kind from them like from any Kinded error.

// FieldError is bad input naming the field: "name: reason". Its kind is Invalid, or its
// sentinel's kind when it has one.
type FieldError struct {
	// Name is the field, flag or parameter that was wrong ("amount_minor", "keep_key").
	Name string
	// Why is the reason, as a phrase a page can say in its reader's language.
	Why Phrase
	// Sentinel, when set, is the package error this one is an instance of (errors.Is finds it).
	Sentinel error
}

// Field is the error of field name, for reason why.
func Field(name string, why Phrase) *FieldError { return &FieldError{Name: name, Why: why} }

// Fieldf is Field with the reason as a format and its arguments (a phrase).
func Fieldf(name, format string, args ...any) *FieldError {
	return &FieldError{Name: name, Why: Phrasef(format, args...)}
}

// Of ties e to a package's sentinel: errors.Is(e, sentinel) holds and e takes its kind.
func (e *FieldError) Of(sentinel error) *FieldError { e.Sentinel = sentinel; return e }

func (e *FieldError) Error() string { return e.Name + ": " + e.Why.String() }

// Unwrap is the sentinel (nil without one).
func (e *FieldError) Unwrap() error { return e.Sentinel }

// ErrorKind is the sentinel's kind, Invalid without one; the error's text is what a user is shown.
func (e *FieldError) ErrorKind() Kind {
	if e.Sentinel == nil {
		return Invalid
	}
	return KindOf(e.Sentinel)
}

// Phrasing is "name: reason".
func (e *FieldError) Phrasing() Phrase { return Phrasef("%s: %s", e.Name, e.Why) }

// RefusedError is a guard's refusal: the action is not allowed in the object's current state
// (Conflict) or not to this actor (Forbidden). Why is the reason an operator can act on.
type RefusedError struct {
	Kind Kind
	Why  Phrase
	// Sentinel, when set, is the package error this one is an instance of (errors.Is finds it).
	Sentinel error
}

// Refused is a refusal of kind for reason why.
func Refused(kind Kind, why Phrase) *RefusedError { return &RefusedError{Kind: kind, Why: why} }

// Refusedf is a Conflict refusal with the reason as a format and its arguments (a phrase).
func Refusedf(format string, args ...any) *RefusedError {
	return &RefusedError{Kind: Conflict, Why: Phrasef(format, args...)}
}

// Of ties e to a package's sentinel: errors.Is(e, sentinel) holds.
func (e *RefusedError) Of(sentinel error) *RefusedError { e.Sentinel = sentinel; return e }

func (e *RefusedError) Error() string { return e.Why.String() }

// Unwrap is the sentinel (nil without one).
func (e *RefusedError) Unwrap() error { return e.Sentinel }

// ErrorKind is the refusal's kind; its reason is what a user is shown.
func (e *RefusedError) ErrorKind() Kind { return e.Kind }

// Phrasing is the reason.
func (e *RefusedError) Phrasing() Phrase { return e.Why }
