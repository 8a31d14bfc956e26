package chaos

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/idemops/idemops/chaos/history"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/demo"
	"github.com/idemops/idemops/retention"
)

// The chaos world's own retention settings: its declined payments (payment.charge keys that
// ended failed_final) keep their answer ShortKeepResponse and their row ShortKeepKey, under a
// floor of a few seconds, so that a run of a minute sees keys tombstoned and deleted and then
// retried late. They are this world's settings, written through the same retention functions
// an operator's console uses; the floor a fresh deployment starts with is not changed by code.
const (
	ShortKeepResponse = 8 * time.Second
	ShortKeepKey      = 16 * time.Second
	shortFloorPart    = 2 * time.Second
	// PurgeEvery is how often the runner has the console purge while traffic runs.
	PurgeEvery = 20 * time.Second
	// lateRetriesPerRound bounds the late retries after one purge.
	lateRetriesPerRound = 12
	// purgeWait bounds the wait for one console-requested purge run.
	purgeWait = 90 * time.Second
)

// shortRetention writes the chaos world's retention floor and its short policy for declined
// payments.
func shortRetention(ctx context.Context, db *gorm.DB) error {
	f := retention.Floor{ClientRetry: shortFloorPart, Backfill: shortFloorPart, ReconciliationLag: shortFloorPart}
	if err := retention.SetFloor(ctx, db, f, "operator:chaos"); err != nil {
		return fmt.Errorf("chaos: retention floor: %w", err)
	}
	p := retention.Policy{Operation: demo.OperationCharge, State: claim.StateFailedFinal, KeepResponse: ShortKeepResponse, KeepKey: ShortKeepKey}
	if err := retention.SavePolicy(ctx, db, p, "operator:chaos"); err != nil {
		return fmt.Errorf("chaos: retention policy: %w", err)
	}
	return nil
}

// purger serializes purge rounds (the schedule's operator purge and the runner's own).
type purger struct{ mu sync.Mutex }

// keyPresence is what a purge may change of a key: its row, and its stored answer.
type keyPresence struct {
	Tenant, Key, State string
	Answer             bool
}

// presence reads every payment.charge key's row and answer (in every cell).
func (w *world) presence(ctx context.Context) (map[string]keyPresence, error) {
	m := map[string]keyPresence{}
	for _, c := range w.pgs {
		var rows []keyPresence
		if err := c.db.WithContext(ctx).Raw(`SELECT tenant, key, state, response_day IS NOT NULL AS answer FROM idempotency_keys WHERE operation = ?`,
			demo.OperationCharge).Scan(&rows).Error; err != nil {
			return nil, err
		}
		for _, r := range rows {
			m[r.Tenant+"\x00"+r.Key] = r
		}
	}
	return m, nil
}

// purgeRound has the console run the purge job and records, for every declined payment key,
// what the purge did to it (a Purge operation spanning the run; a client call meanwhile is
// ordered by the checker); then it retries up to lateRetriesPerRound of the keys it tombstoned or deleted, with their keys and
// intents, as a client whose retry arrives after retention. why names the round in the log.
func (w *world) purgeRound(ctx context.Context, why string) string {
	w.purge.mu.Lock()
	defer w.purge.mu.Unlock()
	t := w.traffic
	t.mu.Lock()
	var done []*keyRecord
	finished := map[*keyRecord]bool{} // the client's own calls are over: it may retry late
	for _, r := range t.keys {
		if r.Key != "" {
			done = append(done, r)
			finished[r] = r.Done
		}
	}
	t.mu.Unlock()
	before, err := w.presence(ctx)
	if err != nil {
		return "purge skipped: keys not read: " + oneLine(err)
	}
	lastRun := make([]int64, len(w.pgs)) // each cell's daemon runs its own purge
	for i, c := range w.pgs {
		_ = c.db.WithContext(ctx).Raw(`SELECT coalesce(max(id), 0) FROM job_runs`).Scan(&lastRun[i]).Error
	}
	// Only failed_final keys fall under a short policy; any other key the purge touched would
	// answer a later call Expired with no purge in its history, which the checker refuses.
	kept := done[:0]
	for _, r := range done {
		if before[r.Tenant+"\x00"+r.Key].State == string(claim.StateFailedFinal) {
			kept = append(kept, r)
		}
	}
	done = kept
	ends := make([]func(history.Output), len(done))
	for i, r := range done {
		ends[i] = w.hist.Begin(history.Input{Key: r.histKey(), Kind: history.Purge})
	}
	if _, err := w.api.call(ctx, w.tokens[0], http.MethodPost, "/api/v1/jobs/run", map[string]string{"name": "purge"}, nil); err != nil {
		// Not requested: nothing changed under these keys. (A request that did reach the
		// console is waited for below all the same.)
		w.logf("purge (%s): run not requested: %v", why, err)
	}
	for _, c := range w.pgs[1:] { // the console asks the control cell's daemon; the runner the others'
		if err := daemon.RunNow(ctx, c.db, "purge"); err != nil {
			w.logf("purge (%s): %s run not requested: %v", why, c.label(), err)
		}
	}
	status := ""
	statuses := make([]string, len(w.pgs))
	deadline := time.Now().Add(purgeWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for i, c := range w.pgs {
			var st []string
			if statuses[i] == "" {
				_ = c.db.WithContext(ctx).Raw(`SELECT status FROM job_runs WHERE job = 'purge' AND id > ? AND finished_at IS NOT NULL`, lastRun[i]).Scan(&st).Error
			}
			if len(st) > 0 {
				statuses[i] = st[0]
			}
		}
		if !slices.Contains(statuses, "") {
			status = statuses[0]
			if w.withCells() {
				status = strings.Join(statuses, "/")
			}
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	after, err := w.presence(ctx)
	if err != nil {
		return "purge: keys not read after the run: " + oneLine(err) // the operations stay open: not in the history
	}
	var late []*keyRecord
	deleted, tombstoned := 0, 0
	for i, r := range done {
		k := r.Tenant + "\x00" + r.Key
		b, was := before[k]
		a, is := after[k]
		out := history.Output{Deleted: was && !is, Tombstoned: was && is && b.Answer && !a.Answer}
		ends[i](out)
		if out.Deleted || out.Tombstoned {
			if out.Deleted {
				deleted++
			} else {
				tombstoned++
			}
			if len(late) < lateRetriesPerRound && finished[r] {
				late = append(late, r)
			}
		}
	}
	if status == "" {
		status = "not finished within " + purgeWait.String()
	}
	var wg sync.WaitGroup
	for _, r := range late {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.mu.Lock()
			t.paths[PathPurgedRetried]++
			t.mu.Unlock()
			t.send(ctx, r, r.Body, nil, false)
		}()
	}
	wg.Wait()
	detail := fmt.Sprintf("purge run %s: %d keys deleted, %d tombstoned; %d retried late", status, deleted, tombstoned, len(late))
	w.logf("purge (%s): %s", why, detail)
	return detail
}

// purgeLoop runs a purge round every PurgeEvery until ctx ends.
func (w *world) purgeLoop(ctx context.Context) {
	tick := time.NewTicker(PurgeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.purgeRound(context.WithoutCancel(ctx), "every "+PurgeEvery.String())
		}
	}
}
