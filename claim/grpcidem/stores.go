package grpcidem

import (
	"google.golang.org/grpc/codes"

	"github.com/idemops/idemops/claim"
)

// storeFor is the authenticated tenant's store and answer recorder: Config.Store and Answers,
// or, when the service routes by tenant (Config.Stores), the tenant's. A tenant with no store is
// refused before anything is claimed: Unavailable (TENANT_UNAVAILABLE), one log line, Unrouted
// counted. A tenant whose store is down (claim.Unreachable: its cell not reached since start)
// gets a failover's answer instead: Unavailable (STORE_UNAVAILABLE) with a retry delay.
func (s *server) storeFor(tenant, fullMethod string) (*claim.Store, *claim.AnswerRecorder, error) {
	if s.cfg.Stores == nil {
		return s.cfg.Store, s.cfg.Answers, nil
	}
	store, err := s.cfg.Stores(tenant)
	if err != nil && claim.Unreachable(err) {
		return nil, nil, s.errorStatus(fullMethod, err)
	}
	if err != nil || store == nil {
		if s.cfg.Unrouted != nil {
			s.cfg.Unrouted.Add(1)
		}
		s.cfg.Logger.Warn("call refused: no idempotency store for the tenant", "tenant", tenant, "method", fullMethod, "err", err)
		return nil, nil, statusError(codes.Unavailable, ReasonTenantUnavailable,
			"this service cannot take calls for your credential now; nothing was done", nil)
	}
	var answers *claim.AnswerRecorder
	if s.cfg.AnswersOf != nil {
		answers = s.cfg.AnswersOf(store)
	}
	return store, answers, nil
}
