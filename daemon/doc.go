// Package daemon runs idemops' scheduled work: one leader among any number of replicas runs the
// jobs (the lease reclaimer, the outbox relay, reconciliation, retention) on persisted cron
// schedules and records every run.
//
// # Leadership
//
// The leader holds a lease row in daemon_leader (one row per scope) and renews it every
// RenewEvery; the lease lasts LeaseTTL. Every election increments the row's term, and a renewal
// names the term it renews, so a leader that was deposed (its lease expired and someone else was
// elected) cannot renew its way back: its renewal matches no row and it steps down at once. A
// renewal that fails for any reason — no row, an error, a timeout — also steps down, since the
// lease may be about to lapse. Followers try to get elected every RenewEvery, and sooner when the
// current lease is about to run out, so a dead leader is replaced within one TTL of its last
// renewal. Stop resigns by expiring the lease (keeping the term), so a successor does not wait.
//
// Starting a run checks the leader's term inside the same transaction, so a replica that has
// just lost the lease cannot start one; a run already going when the lease is lost is asked to
// stop after its current batch, and cancelled after ShutdownTimeout.
//
// # Schedules
//
// A schedule (table schedules) names a job, its params, a robfig/cron spec and time zone, a
// timeout and next_run_at. The leader polls for due schedules with FOR UPDATE SKIP LOCKED and, in
// one transaction, records the run start in job_runs and moves next_run_at to the spec's next
// time after now. A schedule missed while no leader was up (downtime, failover) is therefore due
// once when a leader is back and runs once: no pile-up of missed slots, and no silent skip. A run
// requested from the console (RunNow) sets run_requested_at; Pause and Resume set paused (a slot
// missed while paused runs once on resume, by the same rule).
//
// # Runs
//
// Every run has a job_runs row: start, end, status (running, succeeded, failed, abandoned,
// timed_out), stats, error and progress (written at most every ProgressEvery). Jobs check
// ShouldStop between batches and return ErrStopped when asked to stop, so a graceful Stop
// finishes the batch in hand; a run still going after ShutdownTimeout is cancelled and recorded
// as abandoned. A new leader marks runs that earlier leaders left running as abandoned.
//
// # Jobs here
//
// ReclaimJob takes over keys whose lease expired and drives each through claim.Store.Drive
// without executing: downstream is asked first. OutboxRelay sends the outbox rows that business
// transactions staged, with the row's downstream key, and looks the document up before any
// resend to a downstream without idempotency.
package daemon
