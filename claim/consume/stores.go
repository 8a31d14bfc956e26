package consume

import (
	"errors"

	"gorm.io/gorm"

	"github.com/idemops/idemops/claim"
)

// errMixedStores fails a batch whose deliveries no longer go to one store (the map changed
// between grouping and handling): each is then handled alone, in its own tenant's store.
var errMixedStores = errors.New("consume: a batch spans stores")

// storeFor is the store a message of tenant is handled in: its tenant's (Config.Stores), or own
// without routing. ok is false for a tenant with no store: logged here, the delivery handed back.
func (c *Consumer) storeFor(own *claim.Store, tenant string) (*claim.Store, bool) {
	if c.cfg.Stores == nil {
		return own, true
	}
	store, err := c.cfg.Stores(tenant)
	if err != nil || store == nil {
		c.cfg.Logger.Warn("consume: no store for the message's tenant; the message is handed back",
			"consumer", c.cfg.Consumer, "tenant", tenant, "err", err)
		return nil, false
	}
	return store, true
}

// dbFor is storeFor for a consumer made with a database (New): the database a message of tenant
// commits in.
func (c *Consumer) dbFor(own *gorm.DB, tenant string) (*gorm.DB, bool) {
	if c.cfg.Stores == nil {
		return own, true
	}
	store, ok := c.storeFor(nil, tenant)
	if !ok {
		return nil, false
	}
	return store.DB(), true
}

// batchDB is the one database every item of a batch commits in; errMixedStores when they are
// not one, or one has no store (each is then handled alone).
func (c *Consumer) batchDB(own *gorm.DB, items []item) (*gorm.DB, error) {
	if c.cfg.Stores == nil {
		return own, nil
	}
	var db *gorm.DB
	for _, it := range items {
		store, err := c.cfg.Stores(it.tenant)
		if err != nil || store == nil || (db != nil && store.DB() != db) {
			return nil, errMixedStores
		}
		db = store.DB()
	}
	return db, nil
}

// byStore groups deliveries by the store their tenants are routed to, in order of first
// appearance; one group without Config.Stores. A tenant with no store gets a group of its own
// per delivery (each is handed back alone).
func (c *Consumer) byStore(items []item) [][]item {
	if c.cfg.Stores == nil || len(items) < 2 {
		return [][]item{items}
	}
	var groups [][]item
	at := map[*claim.Store]int{}
	for _, it := range items {
		store, err := c.cfg.Stores(it.tenant)
		if err != nil || store == nil {
			groups = append(groups, []item{it})
			continue
		}
		i, ok := at[store]
		if !ok {
			i = len(groups)
			at[store] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	return groups
}
