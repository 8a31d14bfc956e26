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

// startBouncers puts pgbouncer in transaction pooling mode in front of every PostgreSQL node
// (docs/SCALING.md) and returns the connection string the parts use: through the poolers
// (several, multi-host, read-write, when the HA set runs), with pgx executing statements
// without named prepared statements — pgbouncer 1.18 does not track those across the server
// connections it hands out.
func (w *world) startBouncers(ctx context.Context, log io.Writer) (string, error) {
	type backendNode struct {
		name string
		port int
	}
	var nodes []backendNode
	db := "postgres"
	if w.ha != nil {
		for _, n := range w.ha.Nodes {
			nodes = append(nodes, backendNode{n.Name, n.Port})
		}
		db = "idemops"
	} else {
		nodes = append(nodes, backendNode{"postgres", w.pg.Port})
	}
	var hosts []string
	for _, n := range nodes {
		b, err := pgha.StartBouncer(ctx, pgha.BouncerOptions{Host: "127.0.0.1", Port: n.port, PoolSize: BouncerPoolSize, Log: log})
		if err != nil {
			return "", fmt.Errorf("chaos: pgbouncer in front of %s: %w", n.name, err)
		}
		w.bouncers = append(w.bouncers, b)
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", b.Port))
	}
	url := "postgres://postgres@" + strings.Join(hosts, ",") + "/" + db + "?sslmode=disable&default_query_exec_mode=exec"
	if w.ha != nil {
		url += "&target_session_attrs=read-write&connect_timeout=2"
	}
	return url, nil
}
