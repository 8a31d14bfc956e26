package downstream

import (
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/idemops/idemops/claim"
)

// Registry holds the Operations of a deployment by name, so the daemon's reclaimer, the
// console's replays and reconciliation fixes can find the Operation a key belongs to.
type Registry struct {
	mu  sync.RWMutex
	ops map[string]claim.Operation
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{ops: map[string]claim.Operation{}} }

// Register adds op under op.Name(). It returns ErrDuplicateOperation when the name is taken,
// and an error for a nil op or an empty name.
func (r *Registry) Register(op claim.Operation) error {
	if op == nil {
		return fmt.Errorf("downstream: register: nil operation")
	}
	name := op.Name()
	if name == "" {
		return fmt.Errorf("downstream: register: operation has an empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ops[name]; ok {
		return fmt.Errorf("downstream: register %q: %w", name, ErrDuplicateOperation)
	}
	r.ops[name] = op
	return nil
}

// Get returns the operation registered under name, or ErrUnknownOperation.
func (r *Registry) Get(name string) (claim.Operation, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	op, ok := r.ops[name]
	if !ok {
		return nil, fmt.Errorf("downstream: %q: %w", name, ErrUnknownOperation)
	}
	return op, nil
}

// Names lists the registered operation names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.ops))
	for n := range r.ops {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// RegisterConfig builds an HTTPOperation for each operation in cfg (sharing hc; nil gets a
// default client) and registers them all, or none when one fails.
func (r *Registry) RegisterConfig(cfg *Config, hc *http.Client) error {
	ops := make([]*HTTPOperation, 0, len(cfg.Operations))
	for i, oc := range cfg.Operations {
		op, err := NewHTTPOperation(oc, hc)
		if err != nil {
			if ce, ok := err.(*ConfigError); ok {
				ce.File, ce.Field = cfg.File, fmt.Sprintf("operations[%d].%s", i, ce.Field)
			}
			return err
		}
		ops = append(ops, op)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range ops {
		if _, ok := r.ops[op.Name()]; ok {
			return fmt.Errorf("downstream: %s: register %q: %w", cfg.File, op.Name(), ErrDuplicateOperation)
		}
	}
	for _, op := range ops {
		r.ops[op.Name()] = op
	}
	return nil
}
