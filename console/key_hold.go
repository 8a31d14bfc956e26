package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/retention"
)

// setHold puts a key on legal hold or lifts it, after checking op may see the key's tenant,
// with the audit row in the same transaction.
func (s *Server) setHold(ctx context.Context, r *request, id int64, hold bool, reason string) (bool, error) {
	k, kc, err := s.keyIn(ctx, r.op, id)
	if err != nil {
		return false, err
	}
	action := "key.legal_hold.lift"
	if hold {
		action = "key.legal_hold.set"
	}
	var changed bool
	err = kc.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if changed, err = retention.SetLegalHold(ctx, tx, k.ID, hold, r.op.Actor(), reason); err != nil {
			return err
		}
		return kc.audit.Append(ctx, tx, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: action, Target: fmt.Sprintf("key:%d", k.ID),
			Tenants: []string{k.Tenant}, Detail: map[string]any{"digest": k.KeyDigest, "reason": truncate(strings.TrimSpace(reason), 500), "changed": changed}})
	})
	return changed, err
}

// holdPage is POST /keys/{id}/hold (administrators): hold=1 sets, hold=0 lifts.
func (s *Server) holdPage(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	var hold bool
	switch c.PostForm("hold") {
	case "1":
		hold = true
	case "0":
	default:
		return inputErr("hold", "must be 1 (set) or 0 (lift)")
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	if _, err := s.setHold(ctx, r, id, hold, c.PostForm("reason")); err != nil {
		return err
	}
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/keys/%d", id))
	return nil
}
