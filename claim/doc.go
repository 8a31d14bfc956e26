// Package claim is the one claim logic of idemops. Services accepting a request, the daemon
// taking over a stuck lease, reconciliation fixes and operators' manual replays all go through
// it; nothing else writes idempotency_keys.
//
// # The contract
//
// A key is unique per (tenant, operation, key). The tenant is an argument that the caller took
// from authentication. A claim is one atomic INSERT … ON CONFLICT DO NOTHING RETURNING, with the
// history event written in the same statement; the loser of a race reads the existing row and
// answers from it (Replay, InProgress, Mismatch, Expired) — it never executes.
//
// States: processing → completed | failed_retryable | failed_final. Only completed and
// failed_final are replayed; failed_retryable is claimed again by the next attempt with the same
// intent (attempt + 1).
//
// # Leases
//
// A processing key carries a lease: owner, a random 128-bit token, and an expiry (default 30 s,
// renewed every TTL/3 by Run). Every write by a holder is a compare-and-set on the token, so a
// holder whose lease was taken over gets ErrLeaseLost and changes nothing. A takeover (of an
// expired lease, or of a failed_retryable key) is a compare-and-set on the row's version.
//
// # Downstream first
//
// An earlier attempt may have reached downstream before it crashed or timed out, so a taker
// must ask downstream before executing (Drive enforces it): found → the document is applied and
// the key completed, nothing executed; not found → the key is parked for a quarantine interval
// and executed only when a second lookup after the quarantine still finds nothing (a not-found
// while the first attempt may still be in flight is not proof); downstream cannot answer → the
// key is parked with a backoff and, after a few tries, flagged "needs attention".
//
// # Intent
//
// Each key stores a fingerprint of the canonical form of the request's intent and the version
// of the canonicalizer that made it. Same key with another fingerprint is ErrMismatch / Kind
// Mismatch: never executed, never answered with the old result.
//
// # Privacy
//
// Logs carry Digest (an HMAC under a deployment secret), never the raw key, request or response.
// The downstream key is derived without a secret, so it survives secret rotation and purges.
package claim
