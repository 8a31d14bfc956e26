package templates

import (
	"context"
	"strings"
)

// The console's names for the codes other packages record: key history events, kinds of
// finding, audit actions. A page shows the name in the operator's language (each is a catalog
// entry) and the code after it in a muted code element, so an operator can still search for it
// (WordOf). A code the maps do not know is shown as code alone.

// eventNames name the kinds of key_events rows (and the claim and completion the key row keeps).
var eventNames = map[string]string{
	"claimed":                   "Claimed",
	"executing":                 "Executing",
	"completed":                 "Completed",
	"failed":                    "Failed",
	"released":                  "Released",
	"taken_over":                "Taken over after its lease expired",
	"downstream_not_found":      "Downstream: not found",
	"lookup_failed":             "Downstream could not be asked",
	"recovered_from_downstream": "Completed from downstream's document",
	"response_expired":          "Stored response expired",
	"legal_hold_set":            "Put on legal hold",
	"legal_hold_lifted":         "Legal hold lifted",
	"marked_final":              "Marked final",
	"released_for_retry":        "Released for retry",
	"mismatch_rejected":         "Retry with another request refused",
	"revealed":                  "Request and response revealed",
	"downstream_checked":        "Downstream checked",
	"replay_requested":          "Replay requested",
	"replay_approved":           "Replay approved",
}

// findingKindNames name the kinds of reconciliation finding.
var findingKindNames = map[string]string{
	"LOCAL_ONLY":             "Only here",
	"CHANNEL_ONLY":           "Only at the channel",
	"STATUS_MISMATCH":        "Status differs",
	"AMOUNT_MISMATCH":        "Amount differs",
	"CURRENCY_MISMATCH":      "Currency differs",
	"DUPLICATE_AT_CHANNEL":   "Charged twice at the channel",
	"DUPLICATE_IN_FILE":      "Line repeated in the file",
	"CONTROL_TOTAL_MISMATCH": "Totals do not add up",
	"SETTLEMENT_MISMATCH":    "Settlement differs",
	"FEE_MISMATCH":           "Fee differs",
}

// auditActionNames name the audit log's actions. A refusal is its action's name with
// "_refused" (auditActionName).
var auditActionNames = map[string]string{
	"login":                               "Signed in",
	"login.refused":                       "Sign-in refused",
	"login.lockout":                       "Sign-in locked out",
	"login.sso.refused":                   "Single sign-on refused",
	"logout":                              "Signed out",
	"operator.add":                        "Operator added",
	"operator.enable":                     "Operator enabled",
	"operator.disable":                    "Operator disabled",
	"operator.passwd":                     "Password changed",
	"operator.set_access":                 "Role and tenants changed",
	"operator.status":                     "Operator status changed",
	"operator.time_zone":                  "Time zone set",
	"operator.language":                   "Language set",
	"token.create":                        "API token created",
	"key.reveal":                          "Request and response revealed",
	"key.check_downstream":                "Downstream checked",
	"key.legal_hold.set":                  "Legal hold set",
	"key.legal_hold.lift":                 "Legal hold lifted",
	"key.mark_final":                      "Key marked final",
	"key.release_for_retry":               "Key released for retry",
	"replay.request":                      "Replay requested",
	"replay.approve":                      "Replay approved",
	"replay.execute":                      "Replay executed",
	"replay.refused":                      "Replay refused",
	"replay.bulk_start":                   "Bulk replay started",
	"replay.bulk_done":                    "Bulk replay finished",
	"replay.recheck":                      "Parked replay checked again",
	"job.run":                             "Job run requested",
	"job.pause":                           "Schedule paused",
	"job.resume":                          "Schedule resumed",
	"reconcile.job.create":                "Recon job created",
	"reconcile.job.update":                "Recon job changed",
	"reconcile.job.enable":                "Recon job switched on or off",
	"reconcile.statement.upload":          "Statement uploaded",
	"reconcile.channel.set_tenants":       "Channel account's tenants set",
	"reconcile.channel.settings":          "Channel account's fetcher set",
	"reconcile.channel.credential":        "Channel credential saved",
	"reconcile.channel.credential.delete": "Channel credential deleted",
	"reconcile.finding.resolve":           "Finding resolved",
	"reconcile.finding.ignore":            "Finding ignored",
	"reconcile.finding.recover":           "Finding recovered from the channel",
	"reconcile.finding.reopen":            "Finding reopened",
	"reconcile.findings.bulk_start":       "Bulk action on findings started",
	"reconcile.findings.bulk_approve":     "Bulk action on findings approved",
	"reconcile.findings.bulk_reject":      "Bulk action on findings rejected",
	"reconcile.findings.bulk_done":        "Bulk action on findings finished",
	"reconcile.findings.export":           "Findings exported",
	"retention.policy.save":               "Retention policy saved",
	"retention.policy.delete":             "Retention policy deleted",
	"retention.floor.set":                 "Retention floor set",
}

// auditActionName is an audit action's name ("" when unknown): a refused action
// ("replay.approve_refused", "POST /keys/:id/replay_refused") is "Refused: " and its action.
func auditActionName(action string) string {
	if n, ok := auditActionNames[action]; ok {
		return n
	}
	return ""
}

// refusedAction is the action a refusal refused ("" when action is no refusal).
func refusedAction(action string) string {
	base, ok := strings.CutSuffix(action, "_refused")
	if !ok || auditActionNames[action] != "" {
		return ""
	}
	return base
}

// eventName, findingKindName: the name of a code in ctx's language, "" when unknown.
func eventName(ctx context.Context, kind string) string { return nameOf(ctx, eventNames, kind) }

func findingKindName(ctx context.Context, kind string) string {
	return nameOf(ctx, findingKindNames, kind)
}

func nameOf(ctx context.Context, names map[string]string, code string) string {
	if n, ok := names[code]; ok {
		return t(ctx, n)
	}
	return ""
}

// EventNames, FindingKindNames: every named code with its English name (the catalog tests).
func EventNames() map[string]string       { return eventNames }
func FindingKindNames() map[string]string { return findingKindNames }
func AuditActionNames() map[string]string { return auditActionNames }

// findingKindOption is a kind as a filter's option (text only): its name, else its code.
func findingKindOption(ctx context.Context, kind string) string {
	if n := findingKindName(ctx, kind); n != "" {
		return n
	}
	return kind
}

// errorCodeNames name the error codes a key's failure records (claim's and the operations').
var errorCodeNames = map[string]string{
	"downstream_not_found":    "Downstream said not found twice",
	"lookup_failed":           "Downstream could not be asked",
	"outcome_unknown":         "Outcome unknown: an earlier attempt did not finish",
	"marked_final":            "Marked final by an administrator",
	"released":                "Released by its holder",
	"operator_released":       "Released for retry by an administrator",
	"execute_error":           "The operation failed",
	"invalid_intent":          "The request is not valid",
	"downstream_key_conflict": "The downstream key is used by another request",
	"charge_rejected":         "The channel rejected the charge",
	"declined":                "Declined by the channel",
	"notification_rejected":   "The notification was refused",
	"insufficient_balance":    "Insufficient balance",
	"panic":                   "The operation panicked",
}

// errorCodePrefixes name the codes made of a prefix and a status (http_503, grpc_unavailable,
// downstream_409).
var errorCodePrefixes = map[string]string{
	"http_":       "Answered with an HTTP error",
	"grpc_":       "Answered with a gRPC error",
	"downstream_": "Downstream answered with an error",
}

// errorCodeName is a failure code's name in ctx's language, "" when unknown.
func errorCodeName(ctx context.Context, code string) string {
	if n, ok := errorCodeNames[code]; ok {
		return t(ctx, n)
	}
	for p, n := range errorCodePrefixes {
		if strings.HasPrefix(code, p) {
			return t(ctx, n)
		}
	}
	return ""
}

// bodyTitle names a key's stored body (Body.Name: "Request", "Response"; either case).
func bodyTitle(name string) string {
	if strings.EqualFold(name, "response") {
		return "Response"
	}
	return "Request"
}

// phaseNames name the phases jobs report (daemon.Progress) and a purge's dry run lists.
var phaseNames = map[string]string{
	"relay":     "Sending the outbox",
	"reclaim":   "Taking over expired leases",
	"waiting":   "Waiting for the statement",
	"read":      "Reading the statement",
	"parse":     "Parsing lines",
	"load":      "Loading lines",
	"match":     "Matching lines to keys",
	"replaying": "Replaying keys",
	"stamp":     "Re-stamping expiries",
	"delete":    "Deleting keys",
	"tombstone": "Dropping stored responses",
}
