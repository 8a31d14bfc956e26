// Package replay is the manual replay workflow: preview, request, approval, execution and bulk
// replays. A manual replay is the most dangerous button in the system, so it is a request with
// guards, never a side path: the operator previews it (the Operation's Lookup, read-only),
// confirms it with a reason and a token bound to the key's version, and — above ApprovalAbove —
// a second operator approves it. Execution is claim.Store.TakeoverAt + Drive: downstream is
// looked up first whatever flags the key carries (a key released for retry too), and the replay
// executes only when its preview showed a send — the prediction travels in the confirmation
// token (CheckReplayToken), is checked again at the confirmation and is kept on the request.
// Which keys may be replayed and what a lookup allows are the claim's rules (Key.ReplayRefusal,
// claim.Judge); this package holds the workflow's own bookkeeping (replay_requests, replay_bulk_runs,
// replay_bulk_items).
//
// A bulk replay is previewed (writing nothing), started once from the preview's HMAC-signed
// plan, and then worked through by the daemon's job BulkJob, with progress in job_runs and on
// the run's row. A crash leaves the job run running until the next leader marks it abandoned;
// the next pass of the job then takes the run again and resumes at its first key without a
// result. Each key's replay request is made under a token derived from (run, seq, key), so a
// resumed pass finds the request an earlier pass made instead of replaying the key again.
//
// The package sits beside the daemon's jobs: it imports claim and daemon, the console calls it
// for every replay action (HTTP, sessions, CSRF and object scope stay in the console), and cmd
// registers its BulkJob with the daemon.
package replay
