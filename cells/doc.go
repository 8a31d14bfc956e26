// Package cells routes tenants to cells: each tenant lives in exactly one PostgreSQL cluster
// (a cell, itself highly available), so one primary's write ceiling and one failover's blast
// radius are a cell's, not the deployment's. Uniqueness stays one atomic constraint in one
// database (seed 002): a key's claim never spans cells.
//
// The map is a YAML file read at start (Load) and validated whole — every tenant in exactly one
// cell — or refused with one line naming the file, line, field or tenant:
//
//	control: a            # the cell whose database holds operators, sessions, audit, recon jobs
//	cells:
//	  a: {id: 1, url: "postgres://h1:5432,h2:5432/idemops?target_session_attrs=read-write", tenants: [acme, initech]}
//	  b: {id: 2, url: "postgres://h3,h4/idemops?target_session_attrs=read-write", tenants: [globex]}
//
// Open turns a map into a Set: one pool per cell, the schema migrated on every cell, and each
// cell's sequences kept in its own id range (cell id << 40 and up), so a row id is unique across
// cells and a tenant move copies rows with their ids. Set.For(tenant) is the only way to a
// tenant's database; a tenant the map does not name has no cell (ErrNoCell): its requests are
// refused, never sent to a default cell. A cell other than the control cell that cannot be
// reached at Open starts unavailable (Cell.Err; its tenants answered as in a failover) and joins
// once it answers and passes the same checks, so one cell's outage never keeps a process from
// serving the others.
//
// No map is today's deployment: one database, no Set, nothing routed.
package cells
