package templates

import (
	"context"
	"sort"
	"time"

	"github.com/a-h/templ"

	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/errs"
)

// fixtures are every exported component of this package filled with realistic data around now:
// times minutes, hours and days before and after it, amounts in several currencies, every kind
// of row a page can show. The pages' tests render each of them (TestFixtures_CoverEveryComponent
// keeps the list whole).
func fixtures(now time.Time) map[string]templ.Component {
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	p := func(t time.Time) *time.Time { return &t }
	str := func(s string) *string { return &s }
	i64 := func(n int64) *int64 { return &n }
	n := func(i int) *int { return &i }
	admin := Chrome{User: "ada", Role: "admin", CSRF: "tok", Active: "keys", IsAdmin: true, IsOperator: true, TimeZone: "Asia/Shanghai", Here: "/keys?state=completed"}
	key := &claim.Key{ID: 42, Tenant: "acme", Operation: "payment.charge", Key: "order-2026-12-04-0042", KeyDigest: "9f86d081884c7d659a2feaa0c55ad015",
		Fingerprint: "2c26b46b68ffc68ff99b453c1d304134", FingerprintVersion: 2, State: claim.StateFailedRetryable, Version: 4,
		LeaseOwner: str("replica-a"), LeaseExpiresAt: p(ago(-20 * time.Second)), Attempts: 2, DownstreamKey: "acme:payment.charge:5f4d",
		AmountMinor: i64(5000000), Currency: str("KRW"), ResponseStatus: n(201), ResourceID: str("ch_3Nq"), ErrorCode: str("downstream_not_found"),
		ErrorDetail: str("downstream twice said not found; the client may retry"), NotFoundAt: p(ago(5 * time.Second)), NeedsAttention: true,
		CreatedAt: ago(3 * time.Hour), UpdatedAt: ago(90 * time.Second), CompletedAt: p(ago(2 * time.Hour)),
		ResponseExpiresAt: p(ago(-72 * time.Hour)), ExpiresAt: p(ago(-30 * 24 * time.Hour)), Held: true}
	events := []claim.Event{
		{ID: 1, KeyID: 42, At: ago(3 * time.Hour), Kind: "claimed", Actor: "service:payments", Detail: claim.JSON(`{"attempt":1}`)},
		{ID: 2, KeyID: 42, At: ago(3*time.Hour - time.Second), Kind: "executing", Actor: "service:payments", Detail: claim.JSON(`{"attempt":1}`)},
		{ID: 3, KeyID: 42, At: ago(2 * time.Hour), Kind: "downstream_not_found", Actor: "daemon", Detail: claim.JSON(`{"quarantine_s":10,"attempt":2}`)},
		{ID: 4, KeyID: 42, At: ago(time.Hour), Kind: "revealed", Actor: "operator:olga", Detail: claim.JSON(`{"fields":["request","response"]}`)},
		{ID: 5, KeyID: 42, At: ago(time.Minute), Kind: "replay_requested", Actor: "operator:olga", Detail: claim.JSON(`{"request":7,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`)},
	}
	keyName := KeyName{ID: 42, Tenant: "acme", Operation: "payment.charge", Key: key.Key}
	keyRows := []KeyRow{
		{ID: 42, Href: "/keys/42", Tenant: "acme", Operation: "payment.charge", Key: key.Key, DigestShort: "9f86d0818",
			State: "failed_retryable", Attempts: 2, CreatedAt: ago(3 * time.Hour), NeedsAttention: true, AmountMinor: i64(5000000), Currency: "KRW"},
		{ID: 43, Href: "/keys/43", Tenant: "globex", Operation: "payment.charge", Key: "gx-1", DigestShort: "0a1b2c3d4",
			State: "completed", Attempts: 1, CreatedAt: ago(50 * 24 * time.Hour)},
	}
	keysView := KeysView{Search: KeySearch{Tenant: "acme", State: "completed"}, States: []string{"processing", "completed", "failed_retryable", "failed_final"},
		Rows: keyRows, NextURL: "/keys?after=43", FirstURL: "/keys", BulkFields: []Field{{"tenant", "acme"}}, Matching: 2, BulkCap: 500}
	keyView := KeyView{Key: key, Events: events, Request: Body{Name: "request", Present: true, Size: 120},
		Response: Body{Name: "response", Present: true, Revealed: true, Text: `{"charge":"ch_3Nq"}`}, CanReveal: true, CanCheck: true,
		Check: CheckView{Done: true, Found: true, Summary: errs.Phrasef("resource %s", "ch_3Nq")}, Headers: "Content-Type: application/json",
		CanReplay: true, CanHold: true, Summary: []SummaryRow{{Label: "amount", Field: "amount_minor", Value: "50000 KRW"}, {Label: "payee", Field: "payee", Value: "merchant-7"},
			{Label: "merchant order no", Field: "merchant_order_no", Value: "o-42"}, {Label: "shoe size", Field: "shoe_size", Value: "42"}},
		Answers: []AnswerRow{{Kind: "replay", Status: 201, Count: 3, First: ago(2 * time.Hour), Last: ago(10 * time.Minute)},
			{Kind: "in_progress", Status: 409, Count: 1, First: ago(3 * time.Hour), Last: ago(3 * time.Hour)}},
		Panels: []KeyPanel{{ID: "order", Title: "Order and channel callbacks",
			Summary: errs.Phrasef("Order %s (payment %s) is %s.", "o-42", "pay_9", errs.Verbatim("paid")),
			Columns: []string{"Received", "Event", "Callback", "Before", "After", "Outcome"},
			Rows: [][]PanelCell{{{Kind: CellTime, At: ago(time.Hour)}, {Kind: CellCode, Text: "charge.succeeded"}, {Kind: CellData, Text: "evt_1"},
				{Kind: CellWord, Text: "awaiting payment"}, {Kind: CellWord, Text: "paid"}, {Kind: CellWord, Text: "applied"}}}}},
		Related: KeyRelated{Replays: []ReplayRow{{ID: 7, Href: "/replays/7", State: "executed", Requester: "olga"}},
			Findings: []RelatedFinding{{ID: 9, Href: "/reconcile/findings?key=42", Kind: "AMOUNT_MISMATCH", KindHelp: "both succeeded with different amounts",
				State: "open", RunID: 3, RunHref: "/reconcile/runs/3", Line: 12, LineHref: "/reconcile/runs/3/line?n=12"}},
			FindingsHref: "/reconcile/findings?key=42", Max: 20},
		EventLinks: map[int64][]EventLink{5: {{Label: errs.Phrasef("replay request #%d", 7), Href: "/replays/7", Class: "event-replay"}}}}
	replayRow := ReplayRow{ID: 7, Href: "/replays/7", KeyID: 42, KeyHref: "/keys/42", Tenant: "acme", DigestShort: "9f86d0818",
		Requester: "olga", Reason: "lost in the outage", Action: errs.Phrasef("a %s of %s to %s", errs.Verbatim("charge"), "50000 KRW", "merchant-7"),
		State: "executing", NeedsApproval: true, Approver: "ada", Outcome: errs.Phrasef("sent: downstream created %s and the key is completed", "ch_3Nq"),
		CreatedAt: ago(2 * time.Minute), CanApprove: true, BulkHref: "/replays/bulk/3",
		Waiting: errs.Phrasef("Downstream said not found at %s. This replay holds the key and looks again at %s (in %s), "+
			"then sends or records what it finds; no second confirmation is needed.", ago(5*time.Second), ago(-5*time.Second), 5*time.Second), Name: keyName}
	bulk := BulkView{ID: 3, Href: "/replays/bulk/3", ProgressHref: "/replays/bulk/3/progress", StartHref: "/replays/bulk/start",
		FilterHref: "/keys?tenant=acme", Filter: "tenant=acme", State: "waiting", RecheckAt: ago(-25 * time.Second), Parked: 1, Operator: "olga", Reason: "channel outage",
		Total: 2, Processed: 1, ByState: []Count{{Label: "failed_retryable", N: 2}}, ByOutcome: []Count{{Label: "not found twice: sent now", N: 2}},
		Results: []Count{{Label: "sent", N: 1}}, Items: []BulkItemRow{{Seq: 1, KeyID: 42, KeyHref: "/keys/42", KeyState: "failed_retryable",
			KeyVersion: 4, Predicted: "not found twice: sent now", Result: "sent", RequestHref: "/replays/7", Name: keyName,
			Detail: errs.Phrasef("downstream could not answer — the key is parked and retried after %s", 30*time.Second),
			Parked: true, RecheckAt: ago(-25 * time.Second), Checks: 1}},
		Expires: ago(-10 * time.Minute)}
	bulkPreview := bulk
	bulkPreview.Preview, bulkPreview.Plan, bulkPreview.Token = true, "plan", "tok"
	runRow := RunRow{ID: 11, Href: "/jobs/runs/11", Schedule: "reclaim", Job: "reclaim", Trigger: "schedule", Replica: "replica-a", Term: 3,
		Status: "running", StartedAt: ago(125 * time.Second), DeadlineAt: ago(-10 * time.Minute), ProgressAt: ago(2 * time.Second),
		Phase: "lookups", Done: 40, Total: 100, Stats: `{"taken_over":3}`}
	doneRun := runRow
	doneRun.ID, doneRun.Status, doneRun.FinishedAt, doneRun.Error = 10, "failed", ago(time.Hour-1500*time.Millisecond), errs.Phrasef("The run failed: %s", "dial tcp 10.0.0.9:443: connection refused")
	doneRun.StartedAt = ago(time.Hour)
	jobs := JobsView{HasLeader: true, Leader: LeaderRow{ID: "replica-a", Term: 3, ElectedAt: ago(26 * time.Hour), ExpiresAt: ago(-12 * time.Second)},
		Replicas: []ReplicaRow{{ID: "replica-a", Name: "replica-a", Host: "ops-1", PID: 4242, StartedAt: ago(26 * time.Hour), LastSeen: ago(3 * time.Second), IsLeader: true}},
		Schedules: []ScheduleRow{
			{Name: "reclaim", Job: "reclaim", Spec: "@every 10s", TimeZone: "UTC", NextRunAt: ago(-4 * time.Second), LastStatus: "succeeded", LastStarted: ago(6 * time.Second)},
			{Name: "purge", Job: "purge", Spec: "0 3 * * *", TimeZone: "Asia/Shanghai", NextRunAt: ago(2 * time.Second), Paused: true, Requested: true,
				LastStatus: "failed", LastStarted: ago(25 * time.Hour), LastError: errs.Verbatim("left running by an earlier leader")}},
		Runs:   RunsView{Rows: []RunRow{runRow, doneRun}, Poll: true, PollHref: "/jobs/runs", Jobs: []string{"reclaim", "purge"}, Statuses: []string{"running", "failed"}},
		CanRun: true, CanPause: true, Notice: "Run requested: the leader starts it at its next poll."}
	reconRun := ReconRunRow{ID: 3, Href: "/reconcile/runs/3", Job: "wx-daily", Channel: "wechat", BillDate: "2026-12-03", Status: "succeeded",
		Actor: "daemon", RowsParsed: 1200, RowsLoaded: 1180, RowsMatched: 1175, Counts: []KindCount{{Kind: "AMOUNT_MISMATCH", N: 2, Href: "/reconcile/findings?run=3"}},
		StartedAt: ago(5 * time.Hour), FinishedAt: p(ago(5*time.Hour - 40*time.Second)), Statement: errs.Phrasef("#%d version %d", 5, 1)}
	reconJob := ReconJobRow{Name: "wx-daily", Channel: "wechat", Format: "wechat", Operations: "payment.charge", Fetcher: "wechatpay_v3", Bill: "tradebill",
		CronSpec: "0 10 * * *", TimeZone: "Asia/Shanghai", Enabled: true, NextRun: p(ago(-18 * time.Hour)), Href: "/reconcile/jobs/wx-daily"}
	nextRuns := NextRunsView{Times: []time.Time{ago(-18 * time.Hour), ago(-42 * time.Hour)}}
	finding := FindingRow{ID: 9, RunID: 3, Channel: "wechat", BillDate: "2026-12-03", Kind: "AMOUNT_MISMATCH", Subject: "key:42", KeyID: 42,
		KeyHref: "/keys/42", Detail: `{"line":12}`, State: "open", CreatedAt: ago(5 * time.Hour), CanRecover: true, Key: keyName,
		KindHelp: "both succeeded with different amounts", ChannelSide: FindingSide{Status: "success", Amount: i64(50000), Currency: "CNY"},
		LocalSide: FindingSide{Status: "completed", Amount: i64(49900), Currency: "CNY"}, Line: 12,
		Money:    []FindingAmount{{Label: "stated", Amount: "45.00 CNY"}, {Label: "computed", Amount: "45.640 CNY"}},
		LineHref: "/reconcile/runs/3/line?n=12"}
	finding.OrderNo, finding.Amount, finding.ChannelKind = "o-42", "500.00 CNY", "wechatpay_v3"
	resolved := finding
	resolved.ID, resolved.State, resolved.Resolver, resolved.ReasonCode, resolved.Note = 10, "resolved", "olga", "refunded_at_channel", "refunded"
	labelled := resolved
	labelled.ID, labelled.ReasonCode, labelled.ReasonLabel = 11, "corrected_at_channel", "Corrected by the channel"
	reasons := map[string][]Reason{"resolve": {{"corrected_at_channel", "Corrected by the channel"}, {"other", "Other (say why in the note)"}},
		"recover": {{"answer_lost", "The channel's answer was lost"}}, "reopen": {{"closed_in_error", "Closed in error"}}}
	findingsView := FindingsView{Search: FindingSearch{State: "open"}, Tabs: []StateTab{{State: "open", Label: "open", N: 2, Href: "/reconcile/findings?state=open", Current: true}},
		Kinds: []string{"AMOUNT_MISMATCH", "LOCAL_ONLY"}, Rows: []FindingRow{finding, resolved, labelled}, NextURL: "/reconcile/findings?before=9",
		FirstURL: "/reconcile/findings?state=open", CanAct: true, Matching: 1234, ExportCSV: "/reconcile/findings/export?format=csv",
		ExportXLSX: "/reconcile/findings/export?format=xlsx", BulkFields: []Field{{"state", "open"}}, Reasons: reasons, Currencies: []string{"CNY", "USD"},
		Form: &FindingForm{FindingID: 9, Action: "resolve", Note: "checked", Error: Translate(LangChinese, "choose a reason"), Field: "reason_code"}}
	groupedView := findingsView
	groupedView.Grouped, groupedView.Rows, groupedView.Form, groupedView.GroupsMore = true, nil, nil, true
	groupedView.Groups = []FindingGroup{{ID: "group-1", Kind: "AMOUNT_MISMATCH", KindHelp: "both succeeded with different amounts", Channel: "wx-main",
		ChannelKind: "wechatpay_v3", BillDate: "2026-12-03", N: 1200, Amounts: []string{"123456.78 CNY", "50000 KRW"},
		Href: "/reconcile/findings?view=list&kind=AMOUNT_MISMATCH", RowsHref: "/reconcile/findings?view=list&kind=AMOUNT_MISMATCH&limit=20"}}
	bulkRun := FindingsBulkRunView{ID: 4, Href: "/reconcile/findings/bulk/4", Action: "resolve", ReasonCode: "corrected_at_channel",
		ReasonLabel: "Corrected by the channel", Note: "refunded in the channel's portal", Filter: "kind=AMOUNT_MISMATCH&channel=wx-main",
		Operator: "olga", Approver: "ada", State: "running", Total: 1200, Processed: 300, Percent: 25,
		Results: []KindCount{{Kind: "resolved", N: 299}, {Kind: "skipped", N: 1}}, Amounts: []string{"123456.78 CNY"},
		CreatedAt: ago(3 * time.Minute), StartedAt: p(ago(2 * time.Minute)), Live: true, Notice: "Approved: the run starts at the daemon's next poll."}
	waitingRun := bulkRun
	waitingRun.ID, waitingRun.State, waitingRun.Approver, waitingRun.Processed, waitingRun.Percent, waitingRun.Results = 5, "pending_approval", "", 0, 0, nil
	waitingRun.CanDecide, waitingRun.Notice = true, ""
	doneBulkRun := bulkRun
	doneBulkRun.ID, doneBulkRun.State, doneBulkRun.Processed, doneBulkRun.Percent, doneBulkRun.Live = 3, "done", 1200, 100, false
	doneBulkRun.FinishedAt, doneBulkRun.Error = p(ago(time.Minute)), "3 findings failed: the channel did not answer"
	bulkPreviewFindings := FindingsBulkPreviewView{Count: 1200, Amounts: []string{"123456.78 CNY", "50000 KRW"},
		ByKind: []KindCount{{Kind: "AMOUNT_MISMATCH", N: 1100}, {Kind: "CHANNEL_ONLY", N: 100}}, Sample: []FindingRow{finding},
		UpTo: "99", NeedsApproval: true, ApprovalAbove: 1000, Cap: 50000, Fields: []Field{{"kind", "AMOUNT_MISMATCH"}},
		FilterHref: "/reconcile/findings?kind=AMOUNT_MISMATCH", Action: "resolve", Reasons: reasons,
		Form: &FindingForm{Action: "resolve", Error: Translate(LangChinese, "choose a reason"), Field: "reason_code"}}
	retention := RetentionView{Floor: FloorView{Total: 45 * 24 * time.Hour, ClientRetry: 24 * time.Hour, Backfill: 14 * 24 * time.Hour,
		ReconciliationLag: 30 * 24 * time.Hour, UpdatedBy: "ada", UpdatedAt: ago(48 * time.Hour)},
		Policies: []PolicyRow{{Operation: "payment.charge", State: "completed", KeepResponse: 72 * time.Hour, KeepKey: 90 * 24 * time.Hour, UpdatedBy: "ada", UpdatedAt: ago(time.Hour)}},
		States:   []string{"completed", "failed_final"}, CanEdit: true, Notice: "Policy saved. The next purge re-stamps existing keys under it.",
		Form: PolicyForm{Operation: "payment.charge", State: "completed", KeepResponse: "72h", KeepKey: "30d", Shorter: errs.Phrasef("This is shorter than the default (responses %s, keys %s): keys of %s that end %s lose their stored response after %s "+
			"(a retry then gets 410 instead of the replay) and are deleted after %s (a retry then executes again). Tick the box to save it.",
			72*time.Hour, 30*24*time.Hour, "payment.charge", "completed", 24*time.Hour, 7*24*time.Hour)},
		Preview: PreviewView{Done: true, Operation: "payment.charge", Deleted: 12, Tombstoned: 3400,
			Rows: []DueRow{{Phase: "delete", Operation: "payment.charge", State: "completed", Day: "2026-10-01", N: 12}}},
		History: []PurgeRow{{ID: 5, StartedAt: ago(3 * time.Hour), FinishedAt: p(ago(3*time.Hour - time.Minute)), Actor: "daemon", Operation: "*",
			Status: "ok", Deleted: 1200, Tombstoned: 45000, Restamped: 3, Timeouts: 1, BatchSize: 500}},
		HistoryNext: "/retention?before=5"}
	// Every audit action the console names, and a counted refusal, on one page.
	auditRows := []AuditRow{
		{Seq: 77, At: ago(4 * time.Minute), Actor: "operator:olga", Action: "key.reveal", Target: "key:42", Tenant: "acme",
			Detail: `{"fields":["request","response"]}`, IP: "10.0.0.7", Hash: "abc", Key: keyName},
		{Seq: 76, At: ago(26 * time.Hour), Actor: "operator:ada", Action: "operator.time_zone", Target: "operator:ada",
			Detail: `{"time_zone":"Asia/Shanghai"}`, IP: "10.0.0.8", Hash: "abd"},
		{Seq: 75, At: ago(27 * time.Hour), Actor: "operator:vic", Action: "POST /keys/:id/replay_refused", Target: "key:43", Tenant: "globex",
			Detail: `{"count":3}`, IP: "10.0.0.9", Hash: "abe"}}
	actions := make([]string, 0, len(auditActionNames))
	for a := range auditActionNames {
		actions = append(actions, a)
	}
	sort.Strings(actions)
	for i, a := range actions {
		auditRows = append(auditRows, AuditRow{Seq: int64(74 - i), At: ago(time.Duration(28+i) * time.Hour), Actor: "operator:ada", Action: a,
			Target: "operator:vic", Tenant: "*", Detail: `{}`, IP: "10.0.0.8", Hash: "f00"})
	}
	// A finding of every kind.
	findingRows := []FindingRow{finding, resolved}
	kinds := make([]string, 0, len(findingKindNames))
	for k := range findingKindNames {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for i, k := range kinds {
		f := finding
		f.ID, f.Kind, f.KindHelp = int64(20+i), k, ""
		findingRows = append(findingRows, f)
	}
	findingsView.Kinds, findingsView.Rows = kinds, append(findingRows, labelled)
	groupedView.Kinds = kinds
	return map[string]templ.Component{
		"AuditPage": AuditPage(admin, AuditView{Search: AuditSearch{Action: "key.reveal"}, Rows: auditRows,
			NextURL: "/audit?before=76", FirstURL: "/audit"}),
		"OperatorsPage": OperatorsPage(admin, OperatorsView{Operators: []OperatorRow{
			{ID: 1, Name: "ada", Role: "admin", Tenants: "*", LastLogin: p(ago(time.Minute))},
			{ID: 2, Name: "vic", Role: "viewer", Tenants: "acme", Disabled: true}}, Roles: []string{"viewer", "operator", "admin"},
			Notice: "Operator added.", NewToken: "idem_tok_abc"}),
		"At":     At(ago(90 * time.Second)),
		"AtP":    AtP(p(ago(26 * time.Hour))),
		"Ago":    Ago(ago(3 * 24 * time.Hour)),
		"AgoP":   AgoP(nil),
		"Until":  Until(ago(-12 * time.Minute)),
		"UntilP": UntilP(p(ago(5 * time.Second))),
		"Clock":  Clock(ago(time.Hour)),
		"Day":    Day("2026-12-03"),
		"Took":   Took(2*time.Minute + 5*time.Second),
		"ConsumersPage": ConsumersPage(admin, ConsumersView{Stats: []ConsumerRow{{Consumer: "fulfillment", Tenant: "acme", Processed: 12000,
			Duplicates: 14, InProcessing: 1, Stuck: 1, LastAt: p(ago(8 * time.Second))}}, Key: "pay_1",
			Deliveries:    []DeliveryRow{{Consumer: "fulfillment", Tenant: "acme", BusinessKey: "pay_1", MessageID: "m-1", ConsumedAt: ago(time.Hour), Duplicates: 1, LastDuplicateAt: p(ago(59 * time.Minute))}},
			Compensations: []CompensationRow{{Consumer: "fulfillment", Tenant: "acme", BusinessKey: "pay_2", Kind: "released", KeyID: 42, At: ago(2 * time.Hour)}}}),
		"CSRFField": CSRFField("tok"),
		"Confirm":   Confirm("x", "Pause", sentence(context.Background(), "Policy deleted.")),
		"DashboardPage": DashboardPage(admin, DashboardView{Window: "keys created in the last 24 hours",
			ByState:       []StateCount{{Operation: "payment.charge", State: "completed", N: 12345, Href: "/keys?state=completed"}},
			Open:          []Count{{Label: "processing", N: 3, Href: "/keys?state=processing"}},
			ExpiredLeases: Count{Label: "expired leases", N: 1, Href: "/keys"}, Attention: Count{Label: "need attention", N: 2, Href: "/keys?attention=1"},
			Claims:        Chart{Bars: []Bar{{X: "1", Y: "10", W: "8", H: "140", Minute: ago(30 * time.Minute), N: 12}}, Max: 12, Total: 12, Start: ago(time.Hour), End: now},
			DaemonRunning: true, Daemon: jobs}),
		"DashboardLive": DashboardLive(DashboardView{Window: "keys created in the last 24 hours", Open: []Count{{Label: "processing", N: 3, Href: "/keys?state=processing"}},
			DaemonNote: "Daemon not running: no replica was ever elected (start %s)."}),
		"ClaimsChart":  ClaimsChart(Chart{Start: ago(time.Hour), End: now}),
		"JobsPage":     JobsPage(admin, jobs),
		"JobRuns":      JobRuns(jobs.Runs),
		"JobRunPage":   JobRunPage(admin, doneRun),
		"KeyStateLive": KeyStateLive(key),
		"KeyFindPage":  KeyFindPage(admin, KeyFindView{Key: "gx-1", Rows: keyRows, Limit: 20, Truncated: true}),
		"KeyNameLink":  KeyNameLink(keyName),
		"KeyPanels":    KeyPanels(keyView.Panels),
		"KeysPage":     KeysPage(admin, keysView),
		"KeyPage":      KeyPage(admin, keyView),
		"Bodies":       Bodies(admin, keyView),
		"CheckResult":  CheckResult(admin, keyView),
		"Layout":       Layout(admin, "Keys"),
		"LoginPage":    LoginPage(LoginView{Name: "ada", CSRF: "tok", Next: "/keys", Error: "wrong name or password", SSO: true}),
		"ErrorPage":    ErrorPage(admin, ErrorView{Status: 403, Title: "Forbidden", Message: "not allowed for your role"}),
		"Money":        Money(5000000, "KRW"),
		"MoneyText":    MoneyText("1234567.50 CNY"),
		"ReconPage": ReconPage(admin, ReconView{Jobs: []ReconJobRow{reconJob}, Formats: []string{"wechat", "alipay"}, CanEdit: true, CanRun: true,
			Notice: "Recon job saved.", Form: ReconJobForm{Name: "wx-daily", CronSpec: "0 10 * * *", TimeZone: "Asia/Shanghai"}, NextRuns: nextRuns,
			UploadMax: "256 MiB", Channels: ChannelAccountsView{Rows: []ChannelAccountRow{{Channel: "wechat", Tenants: "acme", Href: "/reconcile/channels/wechat",
				By: "ada", Kind: "wechatpay_v3", Credentials: []string{"apiclient_key (serial 3A2B)"}, Takes: []string{"apiclient_key"}}},
				Kinds: []string{"generic", "wechatpay_v3"}, CanSet: true}}),
		"NextRuns":      NextRuns(nextRuns),
		"ReconJobPage":  ReconJobPage(admin, ReconJobView{Job: reconJob, NextRuns: nextRuns, CanEdit: true, CanRun: true, Runs: []ReconRunRow{reconRun}}),
		"ReconRunsPage": ReconRunsPage(admin, ReconRunsView{Rows: []ReconRunRow{reconRun}, NextURL: "/reconcile/runs?before=3"}),
		"ReconRunPage":  ReconRunPage(admin, ReconRunView{Run: reconRun, Findings: 2, FindingsURL: "/reconcile/findings?run=3"}),
		"ReconRunProgress": ReconRunProgress(ReconRunView{Run: func() ReconRunRow {
			r := reconRun
			r.Status, r.Live, r.FinishedAt = "running", true, nil
			return r
		}()}),
		"FindingsPage":            FindingsPage(admin, findingsView),
		"findings grouped":        FindingsPage(admin, groupedView),
		"FindingRows":             FindingRows(admin, findingsView),
		"FindingsBulkPreviewPage": FindingsBulkPreviewPage(admin, bulkPreviewFindings),
		"FindingsBulkRunPage":     FindingsBulkRunPage(admin, waitingRun),
		"FindingsBulkRunProgress": FindingsBulkRunProgress(admin, bulkRun),
		"bulk run done":           FindingsBulkRunPage(admin, doneBulkRun),
		"FindingsBulkRunsPage":    FindingsBulkRunsPage(admin, FindingsBulkRunsView{Runs: []FindingsBulkRunView{waitingRun, bulkRun, doneBulkRun}}),
		"ConfirmOpen":             ConfirmOpen("y", "Reopen", sentence(context.Background(), "Policy deleted."), true),
		"ReconLinePage": ReconLinePage(admin, ReconLineView{RunID: 3, StatementID: 5, RunHref: "/reconcile/runs/3", FindingsHref: "/reconcile/findings?key=42",
			Line: 12, ChannelTxnID: "4200001234", MerchantOrderNo: "acme:payment.charge:5f4d", Status: "success", Amount: "500.00 CNY",
			OccurredAt: ago(29 * time.Hour), Raw: "`2026-12-03 10:00:00,`4200001234", Key: &keyName}),
		"ReplayPreviewPage": ReplayPreviewPage(admin, ReplayPreviewView{Key: key, Preview: ReplayPreviewData{Allowed: true, Outcome: "send",
			Text: errs.Phrasef("not found — %s will be sent now (downstream also said not found at %s, a quarantine ago)",
				errs.Phrasef("a %s of %s", errs.Verbatim("charge"), "50000 KRW"), ago(time.Minute)), Action: "charge", Amount: "50000 KRW", NeedsApproval: true, Token: "tok"},
			Reason: "outage", CanMarkFinal: true, FinalToken: "f", ReleaseToken: "r", Requests: []ReplayRow{replayRow}}),
		"ReplayPage":    ReplayPage(admin, ReplayView{Req: replayRow}),
		"ReplaysPage":   ReplaysPage(admin, ReplaysView{Pending: []ReplayRow{replayRow}, Recent: []ReplayRow{replayRow}}),
		"BulkPage":      BulkPage(admin, bulk),
		"BulkProgress":  BulkProgress(bulk),
		"BulkForm":      BulkForm(admin, keysView),
		"BulkSelectBar": BulkSelectBar(admin, keysView),
		"RetentionPage": RetentionPage(admin, retention),
		"bulk preview":  BulkPage(admin, bulkPreview),
		"AuditAction":   AuditAction("replay.approve_refused"),
		"Channel":       Channel("wx-main", "wechatpay_v3"),
		"EventKind":     EventKind("downstream_not_found"),
		"FindingKind":   FindingKind("DUPLICATE_AT_CHANNEL", "two successful channel transactions for one key: a double charge"),
		"JobPhase":      JobPhase("tombstone"),
	}
}
