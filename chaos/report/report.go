// Package report is what a chaos run leaves behind: a JSON summary (this file's types) and a
// self-contained HTML page drawn from it. The runner (chaos) fills a Report; this package
// only writes and draws it, so a report can be redrawn from its JSON alone.
package report

import "time"

// Report is the whole outcome of one chaos run. Times on the axis are seconds since StartedAt.
type Report struct {
	Seed      int64     `json:"seed"`
	Duration  string    `json:"duration"` // as asked, e.g. "5m0s"
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	SettledAt time.Time `json:"settled_at"` // when the world was quiet and the invariants were checked
	Passed    bool      `json:"passed"`     // every invariant held
	// Cells are the cells the run split its tenants over (--cells 2); none without cells.
	Cells      []Cell      `json:"cells,omitempty"`
	Components []Component `json:"components"`
	Samples    []Sample    `json:"samples"`
	Faults     []Fault     `json:"faults"`
	// Schedule is the plan drawn from the seed (T = the planned second); Faults is what was
	// injected, when. The same seed gives the same Schedule.
	Schedule   []Fault     `json:"schedule,omitempty"`
	Invariants []Invariant `json:"invariants"`
	// Linearizability is the check of every client operation's history against a model of the
	// key store (Porcupine); nil in reports written before it existed.
	Linearizability *Linearizability `json:"linearizability,omitempty"`
	// Paths counts the logical operations the run drove down each path of the world (http,
	// grpc, outbox_non_idempotent, checkout_token, likes, adjustments, consumer,
	// purged_then_retried).
	Paths  map[string]int `json:"paths,omitempty"`
	Totals Totals         `json:"totals"`
}

// Linearizability is the verdict of the history checker: Result "ok" when every key's history
// has a linearization that the model accepts, "illegal" otherwise (Keys names the first keys
// that have none, Visualization is Porcupine's page of them), "unknown" when the check ran out
// of time.
type Linearizability struct {
	Checker       string   `json:"checker"`
	Operations    int      `json:"operations"`
	Partitions    int      `json:"partitions"`
	Result        string   `json:"result"`
	CheckSeconds  float64  `json:"check_seconds"`
	Keys          []string `json:"keys,omitempty"`
	Visualization string   `json:"visualization,omitempty"` // file name beside report.json
}

// Cell is one cell of a run with cells: its name in the cell map and the tenants it holds.
type Cell struct {
	Name    string   `json:"name"`
	Tenants []string `json:"tenants"`
	// The client's calls for the cell's tenants: how many, how many answered 2xx, and the
	// longest stretch without a successful one (a failover in the other cell should not show).
	Requests            int     `json:"requests"`
	Answered2xx         int     `json:"answered_2xx"`
	LongestUnavailableS float64 `json:"longest_unavailable_s"`
}

// Component is one part of the world and whether the run exercised it; a part that could not
// be started (a package missing, HA not available) says why instead of being silently skipped.
type Component struct {
	Name      string `json:"name"` // "payments-1", "daemon-2", "postgres-ha", "rabbitmq", "paysim", …
	Exercised bool   `json:"exercised"`
	Why       string `json:"why,omitempty"`
}

// Sample is one time bucket (normally one second) of client-observed traffic.
type Sample struct {
	T            float64        `json:"t"` // seconds since StartedAt, bucket start
	Requests     int            `json:"requests"`
	ClaimsPerSec float64        `json:"claims_per_sec"` // answered requests per second (2xx + replays)
	P50Ms        float64        `json:"p50_ms"`
	P99Ms        float64        `json:"p99_ms"`
	Errors       map[string]int `json:"errors,omitempty"` // by kind: "409", "5xx", "conn", "timeout", …
}

// Fault is one injected fault, logged when it was injected.
type Fault struct {
	T      float64 `json:"t"`
	Kind   string  `json:"kind"`   // "kill-service", "kill-daemon-leader", "kill-pg-primary", "broker-restart", "paysim-error", "paysim-drop", "paysim-latency", "callback-dup", "callback-reorder", "operator-replay", "bulk-replay", "retention-purge", "reconcile-run"
	Target string  `json:"target"` // which process or key digest
	Detail string  `json:"detail,omitempty"`
}

// Invariant is one rule checked after the world settled. Violations name the key (digest) or
// object that broke it; Checked is how many objects were looked at.
type Invariant struct {
	Name string `json:"name"`
	// Cell is the cell it was checked in, in a run with cells (each invariant once per cell);
	// "" without cells.
	Cell       string   `json:"cell,omitempty"`
	OK         bool     `json:"ok"`
	Checked    int      `json:"checked"`
	Violations []string `json:"violations,omitempty"`
}

// Totals are the figures a closing note quotes.
type Totals struct {
	Requests            int            `json:"requests"`
	Answered2xx         int            `json:"answered_2xx"`
	FaultsByKind        map[string]int `json:"faults_by_kind"`
	WorstP99Ms          float64        `json:"worst_p99_ms"`
	LongestUnavailableS float64        `json:"longest_unavailable_s"` // longest stretch with no successful claim
	LogicalKeys         int            `json:"logical_keys"`          // idempotency keys the client used (each a logical payment)
	P99Ms               float64        `json:"p99_ms"`                // p99 of every client call of the run
}
