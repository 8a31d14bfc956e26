package chaos

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/idemops/idemops/internal/pgha"
)

// BouncerPoolSize is the server connections each pgbouncer keeps per database and user: the
// parts' pools (up to 40 client connections each, seven parts) share them.
const BouncerPoolSize = 40

// startBouncers puts pgbouncer in transaction pooling mode in front of every PostgreSQL node of
// cell c (docs/SCALING.md) and sets c.partsURL, the connection string the parts use: through the
// poolers (several, multi-host, read-write, when the HA set runs), with pgx executing statements
// without named prepared statements — pgbouncer 1.18 does not track those across the server
// connections it hands out.
func (w *world) startBouncers(ctx context.Context, c *cell, log io.Writer) error {
	type backendNode struct {
		name string
		port int
	}
	var nodes []backendNode
	db := "postgres"
	if c.ha != nil {
		for _, n := range c.ha.Nodes {
			nodes = append(nodes, backendNode{n.Name, n.Port})
		}
		db = "idemops"
	} else {
		nodes = append(nodes, backendNode{"postgres", c.pg.Port})
	}
	var hosts []string
	for _, n := range nodes {
		b, err := pgha.StartBouncer(ctx, pgha.BouncerOptions{Host: "127.0.0.1", Port: n.port, PoolSize: BouncerPoolSize, Log: log})
		if err != nil {
			if c.name != "" {
				return fmt.Errorf("chaos: pgbouncer in front of cell %s's %s: %w", c.name, n.name, err)
			}
			return fmt.Errorf("chaos: pgbouncer in front of %s: %w", n.name, err)
		}
		c.bouncers = append(c.bouncers, b)
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", b.Port))
	}
	c.partsURL = "postgres://postgres@" + strings.Join(hosts, ",") + "/" + db + "?sslmode=disable&default_query_exec_mode=exec"
	if c.ha != nil {
		c.partsURL += "&target_session_attrs=read-write&connect_timeout=2"
	}
	return nil
}
