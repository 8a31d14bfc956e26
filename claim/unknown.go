package claim

import "time"

// An unknown outcome is held or asked about, never redone blind. When an earlier attempt may
// have reached downstream (it timed out, crashed, or its lease lapsed), the next holder asks
// downstream before it acts, and acts only once downstream has said "not found" twice, a
// quarantine apart: a not-found while the earlier attempt may still be in flight proves nothing.
// Judge is that rule, the one copy of it: Drive settles keys by it, the daemon's outbox relay
// settles messages by it, and an operator's replay preview predicts by it.

// Verdict is what one downstream lookup allows for an attempt whose outcome is unknown.
type Verdict int8

const (
	// AskLater: downstream could not answer. Nothing is done; look again after a backoff (and,
	// after a few tries, ask an operator).
	AskLater Verdict = iota
	// Found: downstream has the document. Record it; nothing is done again.
	Found
	// NotFoundOnce: downstream said not found, but not yet a quarantine after the first
	// not-found (or this is the first). Record the first not-found and look again once the
	// quarantine has passed; nothing is done now.
	NotFoundOnce
	// Absent: downstream said not found a quarantine after an earlier not-found: the earlier
	// attempt never arrived. The action may be done once; doing it uses the proof up (the first
	// not-found is cleared just before, so a crash during it needs a fresh proof).
	Absent
)

func (v Verdict) String() string {
	switch v {
	case Found:
		return "found"
	case NotFoundOnce:
		return "not_found_once"
	case Absent:
		return "absent"
	}
	return "ask_later"
}

// Judge applies the rule to one lookup: found and lookupErr are downstream's answer (found is
// ignored when lookupErr is set), firstNotFound the first not-found recorded since the last
// attempt to act (nil: none), quarantine the interval between the two not-founds.
func Judge(found bool, lookupErr error, firstNotFound *time.Time, quarantine time.Duration) Verdict {
	switch {
	case lookupErr != nil:
		return AskLater
	case found:
		return Found
	case quarantineOver(firstNotFound, quarantine):
		return Absent
	}
	return NotFoundOnce
}

// Judge is Judge under the store's quarantine.
func (s *Store) Judge(found bool, lookupErr error, firstNotFound *time.Time) Verdict {
	return Judge(found, lookupErr, firstNotFound, s.cfg.Quarantine)
}

func quarantineOver(firstNotFound *time.Time, quarantine time.Duration) bool {
	return firstNotFound != nil && time.Since(*firstNotFound) >= quarantine
}
