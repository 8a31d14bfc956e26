// Package retention purges idempotency keys by policy, safely and fast.
//
// # Two stages
//
// A key that ended (completed, failed_final, failed_retryable) first loses its stored response
// and stays as a tombstone — fingerprint, state, resource id — that answers a late retry with
// claim.Expired ("result expired; resource X", HTTP 410), never with a second execution. Later
// the row itself goes, with its key_events (deleted in the same statement). After that a late retry is a new
// intent; the downstream key, derived from tenant|operation|key without a secret, is the same as
// before, so the channel's own idempotency is the second line of defence.
//
// Stored responses live in key_responses, partitioned by the UTC day they were stored (migration
// 00060). The tombstone phase works a day at a time: a day older than yesterday whose responses
// are all due (decided through the (response_day, response_expires_at) index and the small sets
// of held, in-flight and disputed keys) is dropped with its partition, after the few kept ones
// move to today's. The partition is detached under the parent's exclusive lock (a catalog change,
// milliseconds) and its table dropped after commit (keys.DropDetachedResponses): unlinking a
// day's files takes tens of milliseconds that completions would otherwise wait out on the lock. A
// table left detached by a purge that died before dropping it goes with the next purge. A day
// that cannot go yet loses its due responses row by row
// (keys.TombstoneDayResponses). The index walk on response_expires_at described below is gone
// with the per-key tombstone.
//
// # Never purged
//
// Processing keys (including an old failed_retryable key that a retry has just taken again: it
// still carries its old stamps, so every pass excludes state 'processing' explicitly); keys on
// legal hold (SetLegalHold, recorded as a key event by operator:NAME); unresolved keys
// (claim.UnresolvedSQL: held for an operator, flagged "needs attention", or failed retryably with
// an outcome nobody settled — their attempt may have acted outside, and a late retry of a purged
// one would be a new intent that executes without asking), until a retry that asks downstream or
// an operator resolves them (the dashboard counts them; the keys page lists them with
// unresolved=1); keys referenced by an open reconciliation finding (discrepancies.state = 'open';
// the clause is added only when the discrepancies table exists, so this package works before
// reconciliation's migration is applied). Those rules are one SQL predicate in
// keys/retention.go shared by the delete, the tombstone, the day drop and the dry run.
//
// A replay does not extend a key's periods: they run from when the key ended, so what is kept is
// what the policy says; the published key policy says so and why (httpidem.KeyPolicy).
//
// # Policies, the floor, and how they reach the keys
//
// A policy is (operation or '*', state) → keep response, keep key; keep key ≥ keep response.
// An operation's own policy beats '*'. The floor is retry window + back-fill window +
// reconciliation lag (defaults 24 h + 72 h + 48 h = 6 days, stored in retention_settings);
// SavePolicy refuses a keep-key period below it (ErrBelowFloor naming the field and the floor),
// and SetFloor refuses to rise above an existing policy. The purge additionally never deletes a
// key that ended less than the floor ago, whatever its stamps say (a service configured with a
// short claim.Config.KeepKey cannot undercut the floor).
//
// Decision: the expiry columns (response_expires_at, expires_at) stay the truth that claim
// answers from and that the purge's index scans read, and policies are brought to them:
//
//   - claim stamps a key with its Config defaults (72 h / 30 d) when it ends; it knows nothing of
//     policies.
//   - Each purge run starts with a stamp phase that walks keys ended since its cursor, in
//     (updated_at, id) order on idempotency_keys_stamp_idx (partial: state <> 'processing', so
//     new claims do not pay for it), and re-stamps them from their policy: expires_at = ended +
//     keep key; response_expires_at = ended + keep response, except that a response deadline that
//     has already passed never moves later (a tombstone never comes back to life; a key already
//     answered Expired is not replayed again). Keys without a policy keep their stamps. The cursor
//     lives in retention_settings; once caught up it stays StampSlack (5 min) behind now, for
//     transactions that committed late.
//   - Saving or deleting a policy moves the cursor back to the start (and bumps a generation),
//     so the next purge re-stamps every existing ended key in bounded batches (MaxRows per run;
//     a large table is re-stamped over several runs). Nothing heavy runs inside the console's
//     request.
//   - Deletion requires both the stamp and the policy to agree (expires_at < now() and ended +
//     policy keep key < now()), so a policy longer than the stamps takes effect at once, before
//     any re-stamp; a shorter one takes effect when the stamp phase reaches the key. Tombstoning
//     likewise checks both.
//   - Every delete or tombstone batch holds the settings row FOR SHARE and reloads the policies
//     and the floor when their generation moved (every policy or floor change bumps it), so no
//     batch applies a policy or floor that has just changed.
//
// # Purge
//
// Three phases, each in batches: stamp, delete (before tombstone, so that a key due for both is
// deleted rather than first rewritten), tombstone. A batch is one transaction with SET LOCAL
// statement_timeout and lock_timeout, bitmap scans, sorts and JIT off (so that its plan is the
// ordered index walk even while the statistics still count rows an earlier batch removed); it
// picks up to LIMIT rows (default 10,000) in the order of the index that serves the phase —
// (expires_at, id) on idempotency_keys_expires_idx, (response_expires_at, id) on
// idempotency_keys_response_expires_idx, which also carries expires_at so that the tombstone
// pass skips the keys the delete pass owns without reading their rows — after a cursor, so
// spared rows (held, in a finding, covered by a longer policy) are passed once rather than
// rescanned by every batch. Rows are picked without row locks (locking each cost more than
// deleting it) and written by their physical address: a key some writer changed since it was
// picked has a new address and is passed over (met again by the next run), a key being written
// right now is waited for up to the lock timeout, and every row-level condition is checked
// again on the row written; the claim that finds its row gone retries the insert (claim's
// bounded race loop). A deleted key takes its key_events, replay requests and bulk items with
// it and clears outbox.key_id, set-based in the same statement (those tables carry no foreign
// key to idempotency_keys: a trigger per deleted key was a third of the purge's time). A
// timed-out batch changes nothing and is tried again; ShrinkAfter timeouts in a row halve the
// batch (not below MinBatchSize); after MaxTimeouts the run stops with ErrTooManyTimeouts. A
// random pause (PauseMin..PauseMax, 1..5 ms) separates batches. One purge_log row per run (dry
// runs too) records actor, operation filter, counts per phase, operation and state (jsonb),
// timeouts, the batch size it ended with, status and error.
//
// Known limit: an open finding inserted in the same instant as a batch that already read the
// discrepancies table can miss the batch's NOT EXISTS check (it is not evaluated again at the
// delete); reconciliation should reference the key with a foreign key, whose lock conflicts
// with the purge's delete, to close that window.
//
// # Dry run
//
// CountDue counts per phase (delete or tombstone), operation, state and creation day (UTC) what
// a complete run would do now, applying the policies as the stamp phase would have stamped
// them, so its counts match the run that follows. It runs in a READ ONLY transaction with its
// own timeout (it reads every ended key).
//
// # Entry points
//
// The daemon: NewPurgeJob(db, Config) is a daemon.Job named "purge"; its schedule's params are
// Params as JSON ({"dry_run": bool, "operation": "…", "batch": n}). The console and the CLI:
// ListPolicies, SavePolicy, DeletePolicy, GetFloor, SetFloor, PurgeJob.Purge / DryRun,
// PurgeHistory, SetLegalHold. Bad input is an *errs.FieldError of ErrInvalidPolicy,
// ErrBelowFloor or ErrInvalidOptions (IsInputError: HTTP 400, exit 2).
package retention
