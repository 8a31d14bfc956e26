// Package console is the operator console: a gin server with server-rendered pages (templ +
// htmx, assets embedded) and a JSON API for automation with bearer tokens. It is the web layer
// only: it signs operators in and checks roles per route and tenants per object (package
// access), records what they do (package audit), and calls the package that owns each action —
// claim for a key's reveal and downstream check, replay for replays, mark final and release,
// reconcile for statements and findings, retention for policies and holds, daemon for jobs.
// Every write to a key goes through claim.
//
// # Files
//
// One concern per file, named by page and action: key_list.go (GET /keys and /api/v1/keys),
// key_show.go, key_reveal.go, replay_confirm.go, retention_policy_save.go, … A page handler and
// its /api/v1 twin decode and render differently and share one function for everything between;
// both live in the action's file. routes.go is the one table of who may call what.
//
// # Replays
//
// The replay workflow (preview, request, approval, execution, bulk, mark final, release) is the
// replay package's; the console translates HTTP into its calls: it reads the key or request
// within the operator's scope and hands the workflow the operator as a replay.Actor. The replay
// API has the same guards and roles as the pages; a confirmation is two calls: GET the preview
// (it carries the token), POST the token with a reason. A bulk replay's keys are chosen here,
// within the operator's scope (the ids picked on the search page, or everything the search
// matches up to BulkCap); the replay package previews, starts and — as the daemon's job — runs
// it.
//
// # Jobs
//
// The daemon's pages read its tables through the daemon package and steer it the way the
// daemon itself is steered: run now, pause and resume are rows the leader reads at its next
// poll, written together with their audit row. Running a job now is an operator's call;
// pausing and resuming stop or restart a safety net (the reclaimer, the purge), so they are
// an administrator's.
//
// # Reconciliation
//
// Everyone signed in reads jobs, runs and findings; operators run a job now, upload a statement
// and resolve, ignore or recover findings; administrators create, edit, enable and disable
// jobs. The reconciler mirrors a job into the daemon's schedules itself; "run now" asks the
// daemon to run that schedule at its next poll, exactly like the jobs page. Job changes are
// audited right after the reconciler's own transaction, with their outcome; finding resolutions
// are audited by the reconciler through reconcile.LogAuditor (under the finding's tenant), a bulk
// run's one row per finding in the transaction that closes it.
//
// # Retention
//
// Everyone signed in reads the policies, the floor, the dry run and the purge history;
// administrators change policies and the floor and set or lift legal holds. Each change is
// written together with its audit row: the retention functions take a *gorm.DB, so they run
// inside the console's transaction (nested, as a savepoint).
package console
