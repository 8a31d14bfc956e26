package httpidem

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/claim"
)

// KeyPolicy is the published key policy: what a caller must know to use Idempotency-Key on
// this service. It is built from the code's rules and the live retention policy
// (Config.Retention), never copied by hand: the 400 key problems and the 410 carry it, and
// PolicyHandler serves it.
type KeyPolicy struct {
	Header string    `json:"header"`
	Format KeyFormat `json:"format"`
	// GeneratedBy says who makes the key and when.
	GeneratedBy string `json:"generated_by"`
	Scope       string `json:"scope"`
	// SameKeySameRequest and SameKeyOtherRequest say what a reused key answers.
	SameKeySameRequest  string `json:"same_key_same_request"`
	SameKeyOtherRequest string `json:"same_key_other_request"`
	// InProgress says how to learn the outcome of a key still being processed.
	InProgress string `json:"in_progress"`
	StatusURL  string `json:"status_url"`
	// Retention is how long results and keys are kept, per operation and final state.
	Retention         []RetentionTerm `json:"retention"`
	AfterResultExpiry string          `json:"after_result_expiry"`
	AfterKeyExpiry    string          `json:"after_key_expiry"`
	// Unresolved says that a key whose outcome is unknown is kept until it is resolved.
	Unresolved string `json:"unresolved"`
	// ReplaysExtend says whether answering a replay extends how long the result and the key are
	// kept (false), and Why not.
	ReplaysExtend    bool   `json:"replays_extend"`
	ReplaysExtendWhy string `json:"replays_extend_why"`
}

// KeyFormat is the accepted form of a key.
type KeyFormat struct {
	MinLength int    `json:"min_length"`
	MaxLength int    `json:"max_length"`
	Charset   string `json:"charset"`
	Example   string `json:"example"`
}

// RetentionTerm is how long the result and the key of one operation's requests that ended in
// State are kept.
type RetentionTerm struct {
	Operation         string `json:"operation"`
	State             string `json:"state"`
	KeepResultSeconds int64  `json:"keep_result_seconds"`
	KeepKeySeconds    int64  `json:"keep_key_seconds"`
	KeepResult        string `json:"keep_result"`
	KeepKey           string `json:"keep_key"`
}

// RetentionFunc returns the retention policies in force (the retention package's
// retention.LivePolicies); operation "*" covers every operation without its own.
type RetentionFunc func(ctx context.Context) ([]claim.ExpiryPolicy, error)

// publishedStates are the states whose answers are kept and replayed.
var publishedStates = claim.StatesWhere(claim.State.Settled)

// BuildKeyPolicy returns the policy for operations (none: the defaults for every operation),
// with the retention in force now: an operation's own policy, else the '*' policy, else the
// store's defaults (what a key is stamped with when it ends).
func BuildKeyPolicy(ctx context.Context, cfg Config, operations ...string) (*KeyPolicy, error) {
	cfg = cfg.withDefaults()
	var policies []claim.ExpiryPolicy
	if cfg.Retention != nil {
		var err error
		if policies, err = cfg.Retention(ctx); err != nil {
			return nil, fmt.Errorf("key policy: %w", err)
		}
	}
	if len(operations) == 0 {
		operations = []string{"*"}
	}
	sc := cfg.Store.Config()
	p := &KeyPolicy{
		Header: HeaderKey,
		Format: KeyFormat{MinLength: 1, MaxLength: claim.MaxKeyLen, Charset: "printable ASCII (0x20-0x7E); the structured-header string form \"...\" is accepted too",
			Example: "3f2b9c1e-7d4a-4f0e-9b8a-2c6d5e1f0a7b"},
		GeneratedBy: "the client: one key per logical operation, generated before the first attempt (a random UUID is a good key) and sent verbatim on every retry of that operation",
		Scope:       "a key belongs to the authenticated caller and the operation: the same key from another caller, or for another operation, is another key",
		SameKeySameRequest: "the first answer is replayed (same status, body and Content-Type/Location, plus Idempotent-Replayed: true) and nothing is executed again; " +
			"fields that carry no intent (client timestamps, trace ids) may differ",
		SameKeyOtherRequest: "422 key-reused: never executed and never answered with the other request's result; use a new key for a new intent",
		InProgress: "while the first attempt runs, a retry answers 409 request-in-progress with Retry-After and a Location; " +
			"GET that status URL with the same Idempotency-Key header and credential to see the state and, once done, the answer",
		StatusURL: cfg.StatusPath + "?operation={operation}",
		AfterResultExpiry: "once the result is no longer kept, a retry answers 410 result-expired with the resource id and is not executed again; " +
			"query the resource instead",
		AfterKeyExpiry: "once the key itself is no longer kept, a request with it is a new request and executes",
		Unresolved: "a key whose outcome is unknown (held after a 5xx on a route with external effects, or failed after a timeout) is kept, " +
			"whatever its period, until a retry that asks downstream or an operator resolves it",
		ReplaysExtendWhy: "both periods run from when the key ended, so that what is kept is what the policy says: " +
			"they already cover the retry window (the policy floor), an unresolved key is kept anyway, " +
			"and a retry after the result expired is answered 410, never executed again",
	}
	for _, op := range operations {
		for _, state := range publishedStates {
			resp, key := sc.KeepResponse, sc.KeepKey
			if pol, ok := policyFor(policies, op, state); ok {
				resp, key = pol.KeepResponse, pol.KeepKey
			}
			p.Retention = append(p.Retention, RetentionTerm{Operation: op, State: string(state),
				KeepResultSeconds: int64(resp / time.Second), KeepKeySeconds: int64(key / time.Second),
				KeepResult: period(resp), KeepKey: period(key)})
		}
	}
	return p, nil
}

// policyFor picks operation's own policy for state, else the '*' one.
func policyFor(policies []claim.ExpiryPolicy, operation string, state claim.State) (claim.ExpiryPolicy, bool) {
	var star *claim.ExpiryPolicy
	for i, p := range policies {
		if p.State != state {
			continue
		}
		if p.Operation == operation {
			return p, true
		}
		if p.Operation == "*" {
			star = &policies[i]
		}
	}
	if star != nil {
		return *star, true
	}
	return claim.ExpiryPolicy{}, false
}

// period says a duration in days when it is whole days ("30d"), else as Go does ("36h0m0s").
func period(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// PolicyHandler serves the key policy of operations as JSON; mount it at Config.PolicyPath
// (default /idempotency/policy), which the problems link to.
func PolicyHandler(cfg Config, operations ...string) http.Handler {
	cfg = cfg.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { servePolicy(w, r, cfg, operations) })
}

// Policy is PolicyHandler for gin.
func Policy(cfg Config, operations ...string) gin.HandlerFunc {
	cfg = cfg.withDefaults()
	return func(c *gin.Context) {
		servePolicy(c.Writer, c.Request, cfg, operations)
		c.Abort()
	}
}

func servePolicy(w http.ResponseWriter, r *http.Request, cfg Config, operations []string) {
	p, err := BuildKeyPolicy(r.Context(), cfg, operations...)
	if err != nil {
		writeError(w, r, cfg, err)
		return
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=60")
	_, _ = w.Write(b)
}

// keyProblem writes a problem about the key (400 key-missing/key-malformed, 410) carrying the
// key policy for operation and where to find the whole of it.
func keyProblem(w http.ResponseWriter, r *http.Request, cfg Config, operation string, p Problem) {
	p.PolicyURL = cfg.PolicyPath
	if pol, err := BuildKeyPolicy(r.Context(), cfg, operation); err == nil {
		p.KeyPolicy = pol
	} else {
		cfg.Logger.Warn("key policy unavailable for a problem answer", "err", err)
	}
	writeProblemDoc(w, p)
}

// Markdown renders the policy as docs/SERVICE.md publishes it (a test keeps that copy equal to
// the policy built with the default retention).
func (p *KeyPolicy) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "- **Key**: the `%s` header, %d–%d characters of %s.\n", p.Header, p.Format.MinLength, p.Format.MaxLength, p.Format.Charset)
	fmt.Fprintf(&b, "- **Who generates it**: %s.\n", p.GeneratedBy)
	fmt.Fprintf(&b, "- **Scope**: %s.\n", p.Scope)
	fmt.Fprintf(&b, "- **Same key, same request**: %s.\n", p.SameKeySameRequest)
	fmt.Fprintf(&b, "- **Same key, other request**: %s.\n", p.SameKeyOtherRequest)
	fmt.Fprintf(&b, "- **In progress**: %s (`%s`).\n", p.InProgress, p.StatusURL)
	b.WriteString("- **Retention**:")
	for i, t := range p.Retention {
		if i > 0 {
			b.WriteString(";")
		}
		op := "`" + t.Operation + "`"
		if t.Operation == "*" {
			op = "every operation"
		}
		fmt.Fprintf(&b, " %s, `%s`: result kept %s, key kept %s", op, t.State, t.KeepResult, t.KeepKey)
	}
	b.WriteString(".\n")
	fmt.Fprintf(&b, "- **After that**: %s; %s.\n", p.AfterResultExpiry, p.AfterKeyExpiry)
	fmt.Fprintf(&b, "- **Unresolved keys**: %s.\n", p.Unresolved)
	extend := "no"
	if p.ReplaysExtend {
		extend = "yes"
	}
	fmt.Fprintf(&b, "- **Does a replay extend them?** %s: %s.\n", extend, p.ReplaysExtendWhy)
	return b.String()
}
