// Package claimtest is a test rig for a service that keeps each tenant's keys in a database of
// its own (cells): one claim.Store per tenant, the adapters' Stores function over them, and a
// counter for the calls they refuse as unrouted. Only tests import it.
package claimtest

import (
	"fmt"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// Stores holds a claim.Store per tenant.
type Stores map[string]*claim.Store

// Open opens a store with the digest secret on each tenant's database in dbs.
func Open(t testing.TB, secret []byte, dbs map[string]*gorm.DB) Stores {
	t.Helper()
	stores := Stores{}
	for tenant, db := range dbs {
		s, err := claim.NewStore(db, claim.Config{DigestSecret: secret})
		if err != nil {
			t.Fatal(err)
		}
		stores[tenant] = s
	}
	return stores
}

// Of is the adapters' Stores (httpidem.Config, grpcidem.Config): the tenant's store, or an error
// for a tenant with none, which the adapter refuses as unrouted.
func (s Stores) Of(tenant string) (*claim.Store, error) {
	if st, ok := s[tenant]; ok {
		return st, nil
	}
	return nil, fmt.Errorf("tenant %q has no cell", tenant)
}

// Counter is a claim.Counter a test reads back (the adapters' Unrouted).
type Counter struct{ n atomic.Int64 }

// Add counts v.
func (c *Counter) Add(v float64) { c.n.Add(int64(v)) }

// Value is what was counted so far.
func (c *Counter) Value() int64 { return c.n.Load() }
