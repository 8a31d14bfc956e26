package main

import (
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/downstream"
)

// loadOperations builds the registry of downstream operations from --operations /
// IDEMOPS_OPERATIONS (empty: none). A bad file stops start-up naming the file, field and problem.
func loadOperations(cmd *cobra.Command) (*downstream.Registry, error) {
	reg := downstream.NewRegistry()
	path := flagOrEnv(cmd, "operations", "IDEMOPS_OPERATIONS")
	if path == "" {
		return reg, nil
	}
	cfg, err := downstream.LoadConfig(path)
	if err != nil {
		return nil, usageError{err}
	}
	if err := reg.RegisterConfig(cfg, &http.Client{Timeout: 30 * time.Second}); err != nil {
		return nil, usageError{err}
	}
	return reg, nil
}

// operationSet adapts a registry to the daemon's and the console's lookups.
type operationSet struct{ r *downstream.Registry }

// Get returns the named operation, if registered.
func (o operationSet) Get(name string) (claim.Operation, bool) {
	op, err := o.r.Get(name)
	return op, err == nil
}
