package console

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/claim/consume"
	"github.com/idemops/idemops/templates"
)

// consumerTenants is what consume's queries take for op: nil for every tenant, else op's list
// (empty: none).
func consumerTenants(op *access.Operator) []string {
	if op.SeesAllTenants() {
		return nil
	}
	return append([]string{}, op.Tenants...)
}

// consumersPage is GET /consumers[?key=BUSINESS_KEY]: read-only, scoped to op's tenants.
func (s *Server) consumersPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	tenants := consumerTenants(r.op)
	var v templates.ConsumersView
	stats, err := consume.ListStats(ctx, s.db, tenants)
	if err != nil {
		return err
	}
	for _, st := range stats {
		v.Stats = append(v.Stats, templates.ConsumerRow{Consumer: st.Consumer, Tenant: st.Tenant, Processed: st.Processed,
			Duplicates: st.Duplicates, InProcessing: st.InProcessing, Stuck: st.Stuck, LastAt: st.LastAt})
	}
	if key := strings.TrimSpace(c.Query("key")); key != "" {
		if len(key) > 255 {
			return inputErr("key", "a business key has at most 255 characters")
		}
		v.Key = key
		ds, err := consume.FindDeliveries(ctx, s.db, tenants, key)
		if err != nil {
			return err
		}
		for _, d := range ds {
			v.Deliveries = append(v.Deliveries, templates.DeliveryRow{Consumer: d.Consumer, Tenant: d.Tenant, BusinessKey: d.BusinessKey,
				MessageID: d.MessageID, ConsumedAt: d.ConsumedAt, Duplicates: d.Duplicates, LastDuplicateAt: d.LastDuplicateAt})
		}
	}
	comps, err := consume.ListCompensations(ctx, s.db, tenants, 50)
	if err != nil {
		return err
	}
	for _, cp := range comps {
		v.Compensations = append(v.Compensations, templates.CompensationRow{Consumer: cp.Consumer, Tenant: cp.Tenant,
			BusinessKey: cp.BusinessKey, Kind: cp.Kind, KeyID: cp.KeyID, At: cp.At})
	}
	s.render(c, http.StatusOK, templates.ConsumersPage(chrome(r, "consumers"), v))
	return nil
}
