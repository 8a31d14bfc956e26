package console

import (
	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/replay"
)

// actorOf is r's operator as the replay workflow sees it.
func actorOf(r *request) replay.Actor { return replayActor(r.op, r.ip) }

func replayActor(op *access.Operator, ip string) replay.Actor {
	return replay.Actor{ID: op.ID, Name: op.Name, Tenants: op.Tenants, IP: ip}
}
