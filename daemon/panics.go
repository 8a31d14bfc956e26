package daemon

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/idemops/idemops/claim"
)

// panics collects what a run's workers recovered: a panic in an Operation or a Sender is
// recovered where it happens (the key held or parked, the row handed back), the run carries on
// with the rest of its batch, and it then fails naming the panics' types, so that the job run
// shows a bug that a log line alone would hide.
type panics struct {
	mu    sync.Mutex
	types map[string]int
}

// add records a recovered panic (nil: none).
func (p *panics) add(e *claim.PanicError) {
	if e == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.types == nil {
		p.types = map[string]int{}
	}
	p.types[e.Method+" "+e.Type]++
}

// err is the run's error when anything panicked (nil otherwise): what panicked, how often, and
// what became of the work.
func (p *panics) err(what, became string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.types) == 0 {
		return nil
	}
	var parts []string
	n := 0
	for t, c := range p.types {
		parts = append(parts, fmt.Sprintf("%s ×%d", t, c))
		n += c
	}
	sort.Strings(parts)
	return fmt.Errorf("%d %s panicked, recovered (%s); %s", n, what, strings.Join(parts, ", "), became)
}
