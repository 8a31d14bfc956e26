package paysim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// HeaderFault forces faults for one request: a comma-separated list of FaultNone, FaultError,
// FaultDropResponse, FaultDoubleCharge, "latency=DURATION", and the callback faults
// FaultNotifyDuplicate, FaultNotifyReorder, FaultLateClose and "notify-delay=DURATION".
const HeaderFault = "X-Paysim-Fault"

// Fault names accepted in HeaderFault.
const (
	// FaultNone suppresses every configured random fault for the request.
	FaultNone = "none"
	// FaultError answers 503 before anything is committed.
	FaultError = "error"
	// FaultDropResponse commits, then closes the connection without an answer.
	FaultDropResponse = "drop-response"
	// FaultDoubleCharge charges twice (only for charges sent without a key).
	FaultDoubleCharge = "double-charge"
	// FaultNotifyDuplicate sends the request's callback once more after it is acknowledged.
	FaultNotifyDuplicate = "notify-duplicate"
	// FaultNotifyReorder holds the request's callback back until the order's next one is tried.
	FaultNotifyReorder = "notify-reorder"
	// FaultLateClose follows a succeeded charge's callback with a stale charge.closed.
	FaultLateClose = "late-close"
)

// faults is what happens to one request.
type faults struct {
	latency      time.Duration
	err          bool
	drop         bool
	doubleCharge bool
	// none: the request asked for no fault at all (random callback faults included).
	none bool
	// Faults of the callback the request causes.
	notifyDup, notifyReorder, lateClose bool
	notifyDelay                         time.Duration
}

// maxFaultSubjects bounds the per-subject request counters; past it they start again (the
// decisions stay a pure function of seed, subject and count within a run of that size).
const maxFaultSubjects = 200_000

// roll is a uniform number in [0, 1) that depends only on the seed, the fault, the subject
// (key or order number) and how many requests for that subject came before.
func (s *Server) roll(fault, subject string, n uint64) float64 {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d|%s|%s|%d", s.cfg.Seed, fault, subject, n)))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// decideFaults draws the faults for a request on subject, then applies the request's own
// X-Paysim-Fault header. endpoint separates the counters of calls that share a subject.
func (s *Server) decideFaults(r *http.Request, endpoint, subject string) (faults, error) {
	s.mu.Lock()
	if len(s.faultCounts) >= maxFaultSubjects {
		clear(s.faultCounts)
	}
	ck := endpoint + "\x00" + subject
	n := s.faultCounts[ck]
	s.faultCounts[ck] = n + 1
	s.mu.Unlock()

	subject = endpoint + "|" + subject
	f := faults{latency: s.cfg.Latency}
	if s.cfg.LatencyJitter > 0 {
		f.latency += time.Duration(s.roll("latency", subject, n) * float64(s.cfg.LatencyJitter))
	}
	f.err = s.roll("error", subject, n) < s.cfg.ErrorRate
	f.drop = s.roll("drop", subject, n) < s.cfg.DropResponseRate
	f.doubleCharge = s.roll("double", subject, n) < s.cfg.DoubleChargeRate

	h := r.Header.Get(HeaderFault)
	if h == "" {
		return f, nil
	}
	if len(h) > 200 {
		return f, fmt.Errorf("%s: longer than 200 characters", HeaderFault)
	}
	for _, part := range strings.Split(h, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == FaultNone:
			f = faults{none: true}
		case part == FaultNotifyDuplicate:
			f.notifyDup = true
		case part == FaultNotifyReorder:
			f.notifyReorder = true
		case part == FaultLateClose:
			f.lateClose = true
		case strings.HasPrefix(part, "notify-delay="):
			d, err := time.ParseDuration(strings.TrimPrefix(part, "notify-delay="))
			if err != nil || d <= 0 || d > time.Hour {
				return f, fmt.Errorf("%s: %q is not a delay between 0 and 1h", HeaderFault, part)
			}
			f.notifyDelay = d
		case part == FaultError:
			f.err = true
		case part == FaultDropResponse:
			f.drop = true
		case part == FaultDoubleCharge:
			f.doubleCharge = true
		case strings.HasPrefix(part, "latency="):
			d, err := time.ParseDuration(strings.TrimPrefix(part, "latency="))
			if err != nil || d < 0 || d > time.Minute {
				return f, fmt.Errorf("%s: %q is not a latency between 0 and 1m", HeaderFault, part)
			}
			f.latency = d
		default:
			return f, fmt.Errorf("%s: unknown fault %q (want none, error, drop-response, double-charge, latency=DURATION, notify-duplicate, notify-reorder, notify-delay=DURATION or late-close)", HeaderFault, part)
		}
	}
	return f, nil
}

// wait sleeps for the request's latency, or until the client goes away.
func (f faults) wait(r *http.Request) {
	if f.latency <= 0 {
		return
	}
	t := time.NewTimer(f.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// dropResponse ends a request whose effect is committed without answering it: the connection
// is hijacked and closed, so the client sees a transport error and cannot know the outcome.
// Where hijacking is impossible (HTTP/2, recorders) it answers 502, just as ambiguous.
func dropResponse(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusBadGateway, "response_dropped", "paysim dropped the response after committing")
		return
	}
	conn.Close()
}
