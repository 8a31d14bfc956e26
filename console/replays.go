package console

import (
	"context"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim"
	"github.com/idemops/idemops/replay"
)

// The replay workflow (preview, request, approval, execution, bulk, mark final, release) is the
// replay package's; the console translates HTTP into its calls: it reads the key or request
// within the operator's scope and hands the workflow the operator as a replay.Actor.

// actorOf is r's operator as the replay workflow sees it.
func actorOf(r *request) replay.Actor { return replayActor(r.op, r.ip) }

func replayActor(op *access.Operator, ip string) replay.Actor {
	return replay.Actor{ID: op.ID, Name: op.Name, Tenants: op.Tenants, IP: ip}
}

// markFinal is replay's MarkFinal of the key keyID, read within op's scope.
func (s *Server) markFinal(ctx context.Context, op *access.Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	k, err := s.getKey(ctx, op, keyID)
	if err != nil {
		return nil, err
	}
	return s.replays.MarkFinal(ctx, replayActor(op, ip), k, token, reason)
}

// releaseForRetry is replay's ReleaseForRetry of the key keyID, read within op's scope.
func (s *Server) releaseForRetry(ctx context.Context, op *access.Operator, ip string, keyID int64, token, reason string) (*claim.Key, error) {
	k, err := s.getKey(ctx, op, keyID)
	if err != nil {
		return nil, err
	}
	return s.replays.ReleaseForRetry(ctx, replayActor(op, ip), k, token, reason)
}
