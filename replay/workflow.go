package replay

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/claim"
)

// Config sets up a Workflow. Zero fields take the defaults in withDefaults.
type Config struct {
	// DB holds the claim tables and the replay tables.
	DB *gorm.DB
	// Claims is the claim store every replay goes through (required).
	Claims *claim.Store
	// Operations finds a key's Operation; nil refuses every replay ("no operations configured").
	Operations func(name string) (claim.Operation, bool)
	// Audit receives the workflow's audit rows (required).
	Audit *audit.Log
	// ApprovalAbove is the four-eyes threshold: a replay of a key whose amount is above this many
	// minor units waits for a second operator's approval (default 100000; -1: never).
	ApprovalAbove int64
	// BulkCap is the most keys one bulk replay takes (default 500, at most 5000).
	BulkCap int
	// QueryTimeout bounds one database step (default 5 s); LookupTimeout one downstream lookup
	// (default 10 s); BulkPreviewTimeout a bulk preview's lookups together (default 20 s: keys not
	// looked up by then are predicted as "downstream could not answer").
	QueryTimeout, LookupTimeout, BulkPreviewTimeout time.Duration
	// AnswerWait is how long a confirmed single replay may keep its confirm waiting for the
	// outcome before answering with the request's page, which then follows the replay live
	// (default 5 s): a replay that holds its key through a quarantine answers after it.
	AnswerWait time.Duration
	Logger     *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 5 * time.Second
	}
	if c.LookupTimeout == 0 {
		c.LookupTimeout = 10 * time.Second
	}
	if c.BulkPreviewTimeout == 0 {
		c.BulkPreviewTimeout = 20 * time.Second
	}
	if c.AnswerWait == 0 {
		c.AnswerWait = 5 * time.Second
	}
	if c.ApprovalAbove == 0 {
		c.ApprovalAbove = 100000
	}
	if c.BulkCap == 0 {
		c.BulkCap = 500
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.DB == nil:
		return c, errors.New("replay: Config.DB is required")
	case c.Claims == nil:
		return c, errors.New("replay: Config.Claims is required")
	case c.Audit == nil:
		return c, errors.New("replay: Config.Audit is required")
	case c.BulkCap < 1 || c.BulkCap > 5000:
		return c, errors.New("replay: BulkCap must be between 1 and 5000")
	case c.ApprovalAbove < -1:
		return c, errors.New("replay: ApprovalAbove must be -1 (never) or a non-negative amount")
	}
	return c, nil
}

// AllTenants in Actor.Tenants means every tenant.
const AllTenants = "*"

// Actor is the operator a workflow step acts for, as authenticated by the console.
type Actor struct {
	ID      int64
	Name    string
	Tenants []string // ["*"]: every tenant
	IP      string
}

// Ref is how the actor appears in key events and the audit log.
func (a Actor) Ref() string { return "operator:" + a.Name }

// MaySee reports whether a may see keys of tenant.
func (a Actor) MaySee(tenant string) bool {
	return slices.Contains(a.Tenants, AllTenants) || slices.Contains(a.Tenants, tenant)
}

// tenantScope is the SQL condition on a tenant column for a's tenants.
func (a Actor) tenantScope() (string, []any) {
	switch {
	case slices.Contains(a.Tenants, AllTenants):
		return "true", nil
	case len(a.Tenants) == 0:
		return "false", nil
	}
	return "tenant IN ?", []any{a.Tenants}
}

// Workflow is the replay workflow over one database.
type Workflow struct {
	cfg      Config
	db       *gorm.DB
	claims   *claim.Store
	audit    *audit.Log
	log      *slog.Logger
	outcomes *prometheus.CounterVec
	// shared: outcomes is the workflow's that In was called on (registered by whoever made that
	// one), so this one reports no collectors of its own.
	shared   bool
	tokenKey []byte

	bgCtx  context.Context
	bgStop context.CancelFunc
	bg     sync.WaitGroup
}

// New validates cfg and returns a Workflow; Close it to stop the replays it holds in the
// background.
func New(cfg Config) (*Workflow, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, cfg.Claims.Config().DigestSecret)
	m.Write([]byte("idemops/console/confirmation/v1"))
	w := &Workflow{cfg: cfg, db: cfg.DB, claims: cfg.Claims, audit: cfg.Audit, log: cfg.Logger, tokenKey: m.Sum(nil),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idemops_console_replays_total",
			Help: "Executed manual replays by outcome (recorded, sent, failed, not_found_once, lookup_error, refused, error)."},
			[]string{"outcome"})}
	w.bgCtx, w.bgStop = context.WithCancel(context.Background())
	return w, nil
}

// In is the same workflow — configuration, confirmation tokens and metrics — over another
// database holding claim and replay tables: a tenant cell's, whose keys claims reads and changes.
// Its audit rows go to log (the control database's, appending apart from the cell's
// transactions: audit.Log.Elsewhere). Its replays are counted in w's metrics, which are
// registered once, with w: its own Collectors are none. Close it too.
func (w *Workflow) In(db *gorm.DB, claims *claim.Store, log *audit.Log) *Workflow {
	cfg := w.cfg
	cfg.DB, cfg.Claims, cfg.Audit = db, claims, log
	c := &Workflow{cfg: cfg, db: db, claims: claims, audit: log, log: w.log, tokenKey: w.tokenKey, outcomes: w.outcomes, shared: true}
	c.bgCtx, c.bgStop = context.WithCancel(context.Background())
	return c
}

// Config is the workflow's configuration with defaults filled in.
func (w *Workflow) Config() Config { return w.cfg }

// Collectors are the workflow's metrics (executed replays by outcome); none for a workflow made
// by In (its metrics are the one it was made from).
func (w *Workflow) Collectors() []prometheus.Collector {
	if w.shared {
		return nil
	}
	return []prometheus.Collector{w.outcomes}
}

// Close stops replays held in the background (their keys' leases lapse; the outcome is still
// recorded) and waits for them.
func (w *Workflow) Close() {
	w.bgStop()
	w.bg.Wait()
}

func (w *Workflow) background(f func(ctx context.Context)) {
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		// A replay held in the background must not take the console down with it: an
		// Operation's panic is recovered by Drive (the key held); anything else stops here.
		defer func() {
			if p := claim.RecoveredPanic("replay", recover()); p != nil {
				w.log.Error("background replay panicked", "panic_type", p.Type)
			}
		}()
		f(w.bgCtx)
	}()
}

// operation finds the Operation a key belongs to.
func (w *Workflow) operation(name string) (claim.Operation, error) {
	if w.cfg.Operations == nil {
		return nil, refused("this console has no downstream operations configured")
	}
	o, ok := w.cfg.Operations(name)
	if !ok {
		return nil, refused("no operation %q is registered with this console", name)
	}
	return o, nil
}

// Confirmation tokens: "version.nonce.mac", mac = HMAC over action, key, version, operator and
// nonce under a key derived from the deployment secret. A token proves which preview the
// confirmation answers; the version in it makes a confirmation of a key that changed since
// stale; its hash, stored on the replay request, makes it single-use.
const (
	ActionReplay  = "replay"
	ActionFinal   = "final"
	ActionRelease = "release"
)

func (w *Workflow) tokenMAC(action string, operatorID, keyID, version int64, nonce string) string {
	m := hmac.New(sha256.New, w.tokenKey)
	fmt.Fprintf(m, "%s|%d|%d|%d|%s", action, keyID, version, operatorID, nonce)
	return hex.EncodeToString(m.Sum(nil))
}

// replayToken is the confirmation of a replay preview that predicted pred:
// "version.prediction.nonce.mac", the prediction under the MAC, so that a confirmation executes
// only what its preview showed (CheckReplayToken).
func (w *Workflow) replayToken(operatorID, keyID, version int64, pred Prediction) string {
	n := nonce(12)
	return strconv.FormatInt(version, 10) + "." + string(pred) + "." + n + "." +
		w.tokenMAC(ActionReplay+"/"+string(pred), operatorID, keyID, version, n)
}

// CheckReplayToken verifies a replay confirmation for the operator and key and returns the
// version it is bound to and what its preview predicted. A token made by ConfirmToken(ActionReplay,
// …) carries no prediction (""), and a replay confirmed with it never executes. An InputError
// naming "token" when it is not a confirmation of this key by this operator.
func (w *Workflow) CheckReplayToken(operatorID, keyID int64, token string) (int64, Prediction, error) {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 4 || len(token) > 256 {
		version, err := w.CheckToken(ActionReplay, operatorID, keyID, token)
		return version, "", err
	}
	bad := inputErr("token", "is not a confirmation of this key by you; open the preview again")
	version, err := strconv.ParseInt(parts[0], 10, 64)
	pred := Prediction(parts[1])
	if err != nil || version <= 0 || !slices.Contains(Predictions, pred) {
		return 0, "", bad
	}
	want := w.tokenMAC(ActionReplay+"/"+string(pred), operatorID, keyID, version, parts[2])
	if !hmac.Equal([]byte(want), []byte(parts[3])) {
		return 0, "", bad
	}
	return version, pred, nil
}

// ConfirmToken is a confirmation of action on key keyID at version by the operator.
func (w *Workflow) ConfirmToken(action string, operatorID, keyID, version int64) string {
	n := nonce(12)
	return strconv.FormatInt(version, 10) + "." + n + "." + w.tokenMAC(action, operatorID, keyID, version, n)
}

// CheckToken verifies a confirmation token of action for the operator and key and returns the
// version it is bound to; an *errs.FieldError naming "token" otherwise.
func (w *Workflow) CheckToken(action string, operatorID, keyID int64, token string) (int64, error) {
	bad := inputErr("token", "is not a confirmation of this key by you; open the preview again")
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(token) > 256 || len(parts) != 3 {
		return 0, bad
	}
	version, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || version <= 0 {
		return 0, bad
	}
	want := w.tokenMAC(action, operatorID, keyID, version, parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return 0, bad
	}
	return version, nil
}

func tokenHash(parts ...string) []byte {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return sum[:]
}

// CheckReason reads a required reason: trimmed, 1–1000 characters.
func CheckReason(reason string) (string, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		return "", inputErr("reason", "say why (it is kept in the audit log and the key's history)")
	case len(reason) > 1000:
		return "", inputErr("reason", "is longer than 1000 characters")
	}
	return reason, nil
}

// nonce is n random bytes, URL-safe.
func nonce(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
