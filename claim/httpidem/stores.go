package httpidem

import (
	"net/http"

	"github.com/idemops/idemops/claim"
)

// forTenant is cfg with the authenticated tenant's store in it when the service routes by tenant
// (Config.Stores); without Stores it is cfg as given. A tenant with no store is refused here,
// before anything is read or claimed: 503, one log line, Unrouted counted. A tenant whose store
// is down (claim.Unreachable: its cell not reached since start) gets a failover's answer instead:
// 503 store-unavailable with Retry-After, the same key to come back.
func (cfg Config) forTenant(w http.ResponseWriter, r *http.Request, tenant string) (Config, bool) {
	if cfg.Stores == nil {
		return cfg, true
	}
	store, err := cfg.Stores(tenant)
	if err != nil && claim.Unreachable(err) {
		writeError(w, r, cfg, err)
		return cfg, false
	}
	if err != nil || store == nil {
		if cfg.Unrouted != nil {
			cfg.Unrouted.Add(1)
		}
		cfg.Logger.Warn("request refused: no idempotency store for the tenant", "tenant", tenant, "path", r.URL.Path, "err", err)
		writeProblem(w, cfg, http.StatusServiceUnavailable, "tenant-unavailable", "Unavailable for this caller",
			"this service cannot take requests for your credential now; nothing was done", nil)
		return cfg, false
	}
	cfg.Store, cfg.Answers = store, nil
	if cfg.AnswersOf != nil {
		cfg.Answers = cfg.AnswersOf(store)
	}
	return cfg, true
}
