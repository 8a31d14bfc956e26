package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault kinds the schedule draws. kill-pg-primary needs the HA set and is not drawn on a
// single cluster (the report names it as not exercised).
const (
	KindKillService      = "kill-service"
	KindKillDaemonLeader = "kill-daemon-leader"
	KindKillPGPrimary    = "kill-pg-primary"
	KindBrokerRestart    = "broker-restart"
	KindPaysimError      = "paysim-error"
	KindPaysimDrop       = "paysim-drop"
	KindPaysimLatency    = "paysim-latency"
	KindCallbackDup      = "callback-dup"
	KindCallbackReorder  = "callback-reorder"
	KindLateClose        = "callback-late-close"
	KindOperatorReplay   = "operator-replay"
	KindBulkReplay       = "bulk-replay"
	KindRetentionPurge   = "retention-purge"
	KindReconcileRun     = "reconcile-run"
	KindKillPaysim       = "kill-paysim"
	KindKillConsole      = "kill-console"
	KindChannelAnomaly   = "channel-anomaly"
	// KindKillCellPrimary is kill-pg-primary in one cell of a run with cells (--cells 2, HA):
	// that cell's pg_auto_failover primary is killed; the other cell's tenants must not notice.
	KindKillCellPrimary = "kill-cell-primary"
)

// ScheduledKinds are the kinds drawn on a single PostgreSQL cluster, once per minute each.
var ScheduledKinds = []string{KindKillService, KindKillDaemonLeader, KindBrokerRestart, KindPaysimError, KindPaysimDrop,
	KindPaysimLatency, KindCallbackDup, KindCallbackReorder, KindLateClose, KindOperatorReplay, KindBulkReplay,
	KindRetentionPurge, KindReconcileRun, KindKillPaysim, KindKillConsole, KindChannelAnomaly}

// PlannedFault is one entry of the schedule: what, when (since traffic started) and at whom.
type PlannedFault struct {
	At     time.Duration
	Kind   string
	Target string
}

// faultWindow is how long a paysim fault stays on for the traffic that starts meanwhile.
const faultWindow = 4 * time.Second

// Schedule draws the fault schedule for a run of duration d from seed: every kind once in each
// minute (at least once), at a uniform time inside it, kills aimed at a replica drawn too; with
// ha, the PostgreSQL primary is killed once, in the first minute (the set has one standby). It
// uses nothing but the seed, d and ha, so the same seed gives the same schedule.
func Schedule(seed int64, d time.Duration, ha bool) []PlannedFault {
	return ScheduleCells(seed, d, ha, nil)
}

// ScheduleCells is Schedule for a run with cells (names as the cell map lists them). With fewer
// than two cells it is Schedule, draw for draw. With two or more, the primary killed (with ha)
// is one cell's, drawn from the seed (kill-cell-primary instead of kill-pg-primary), and every
// kill-daemon-leader aims at the leader of a cell drawn from the seed; both are drawn after
// everything else, so the times and targets of the other faults are Schedule's.
func ScheduleCells(seed int64, d time.Duration, ha bool, cells []string) []PlannedFault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6661756c74732d31))
	rounds := max(1, int(d/time.Minute))
	w := d / time.Duration(rounds)
	var out []PlannedFault
	for r := range rounds {
		for _, k := range ScheduledKinds {
			// Leave 2 s at the start of a window and 5 s at its end (a window's last fault still
			// lands while traffic runs).
			span := max(w-7*time.Second, time.Second)
			f := PlannedFault{At: time.Duration(r)*w + 2*time.Second + time.Duration(rng.Int64N(int64(span))), Kind: k}
			switch k {
			case KindKillService:
				f.Target = fmt.Sprintf("payments-%d", 1+rng.IntN(2))
			case KindKillDaemonLeader:
				f.Target = "daemon leader"
			case KindBrokerRestart:
				f.Target = "rabbitmq"
			case KindOperatorReplay, KindBulkReplay, KindRetentionPurge, KindReconcileRun, KindKillConsole:
				f.Target = "console"
			default:
				f.Target = "paysim"
			}
			out = append(out, f)
		}
	}
	if ha { // drawn last, so the rest of the schedule is the same with and without HA
		span := max(w-7*time.Second, time.Second)
		f := PlannedFault{At: 2*time.Second + time.Duration(rng.Int64N(int64(span))), Kind: KindKillPGPrimary, Target: "postgres primary"}
		if len(cells) > 1 {
			f.Kind, f.Target = KindKillCellPrimary, CellTarget(cells[rng.IntN(len(cells))], "primary")
		}
		out = append(out, f)
	}
	if len(cells) > 1 { // after the primary: with one cell nothing more is drawn
		for i := range out {
			if out[i].Kind == KindKillDaemonLeader {
				out[i].Target = CellTarget(cells[rng.IntN(len(cells))], "daemon leader")
			}
		}
	}
	slices.SortStableFunc(out, func(a, b PlannedFault) int { return int(a.At - b.At) })
	return out
}

// CellTarget names what a fault aims at in one cell ("cell b primary"); TargetCell reads the
// cell back.
func CellTarget(cell, what string) string { return "cell " + cell + " " + what }

// TargetCell is the cell a planned fault's target names ("" when it names none).
func TargetCell(target string) string {
	rest, ok := strings.CutPrefix(target, "cell ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

// paysimFault is the X-Paysim-Fault value a paysim fault kind puts on traffic in its window.
func paysimFault(kind string) string {
	switch kind {
	case KindPaysimError:
		return "error"
	case KindPaysimDrop:
		return "drop-response"
	case KindPaysimLatency:
		return "latency=1500ms"
	case KindCallbackDup:
		return "notify-duplicate"
	case KindCallbackReorder:
		return "notify-reorder"
	case KindLateClose:
		return "late-close"
	}
	return ""
}

// window is the paysim fault currently open for new traffic.
type window struct {
	mu    sync.Mutex
	fault string
	until time.Time
}

func (w *window) open(fault string, d time.Duration) {
	w.mu.Lock()
	w.fault, w.until = fault, time.Now().Add(d)
	w.mu.Unlock()
}

func (w *window) current() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Now().After(w.until) {
		return ""
	}
	return w.fault
}

// consoleAPI calls the console's /api/v1 with an operator's bearer token.
type consoleAPI struct {
	url string
	hc  *http.Client
}

func (c consoleAPI) call(ctx context.Context, token, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if res.StatusCode >= 300 {
		return res.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, strings.TrimSpace(string(b[:min(len(b), 300)])))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return res.StatusCode, nil
}
