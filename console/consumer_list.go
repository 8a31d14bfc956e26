package console

import (
	"cmp"
	"context"
	"net/http"
	"slices"
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

// consumersPage is GET /consumers[?key=BUSINESS_KEY]: read-only, scoped to op's tenants. Across
// cells each cell is asked for the tenants it holds (a consumer's records move with its
// tenant) and the answers are put together in the one-database order.
func (s *Server) consumersPage(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	key := strings.TrimSpace(c.Query("key"))
	if len(key) > 255 {
		return inputErr("key", "a business key has at most 255 characters")
	}
	ctx, missed := s.leaveOutFailedCells(ctx) // a cell failing over: the others' records, and its name
	type answer struct {
		stats []consume.ConsumerStat
		ds    []consume.Delivery
		comps []consume.Compensation
	}
	got, err := eachCell(ctx, s.cells.For(keyScope(r.op), ""), func(ctx context.Context, cl scopedCell) (answer, error) {
		tenants := consumerTenants(r.op)
		if s.cells.cells != nil {
			tenants = cl.held.Tenants
		}
		var a answer
		var err error
		if a.stats, err = consume.ListStats(ctx, cl.db, tenants); err != nil {
			return a, err
		}
		if key != "" {
			if a.ds, err = consume.FindDeliveries(ctx, cl.db, tenants, key); err != nil {
				return a, err
			}
		}
		a.comps, err = consume.ListCompensations(ctx, cl.db, tenants, consumerCompensationsShown)
		return a, err
	})
	if err != nil {
		return err
	}
	var all answer
	for _, a := range got {
		all.stats, all.ds, all.comps = append(all.stats, a.stats...), append(all.ds, a.ds...), append(all.comps, a.comps...)
	}
	if len(got) > 1 {
		slices.SortStableFunc(all.stats, func(a, b consume.ConsumerStat) int {
			return cmp.Or(cmp.Compare(a.Consumer, b.Consumer), cmp.Compare(a.Tenant, b.Tenant))
		})
		slices.SortStableFunc(all.ds, func(a, b consume.Delivery) int { return cmp.Compare(a.Consumer, b.Consumer) })
		slices.SortStableFunc(all.comps, func(a, b consume.Compensation) int { return b.At.Compare(a.At) })
		all.comps = all.comps[:min(len(all.comps), consumerCompensationsShown)]
	}
	v := templates.ConsumersView{Key: key, Unavailable: missed.list()}
	for _, st := range all.stats {
		v.Stats = append(v.Stats, templates.ConsumerRow{Consumer: st.Consumer, Tenant: st.Tenant, Processed: st.Processed,
			Duplicates: st.Duplicates, InProcessing: st.InProcessing, Stuck: st.Stuck, LastAt: st.LastAt})
	}
	for _, d := range all.ds {
		v.Deliveries = append(v.Deliveries, templates.DeliveryRow{Consumer: d.Consumer, Tenant: d.Tenant, BusinessKey: d.BusinessKey,
			MessageID: d.MessageID, ConsumedAt: d.ConsumedAt, Duplicates: d.Duplicates, LastDuplicateAt: d.LastDuplicateAt})
	}
	for _, cp := range all.comps {
		v.Compensations = append(v.Compensations, templates.CompensationRow{Consumer: cp.Consumer, Tenant: cp.Tenant,
			BusinessKey: cp.BusinessKey, Kind: cp.Kind, KeyID: cp.KeyID, At: cp.At})
	}
	s.render(c, http.StatusOK, templates.ConsumersPage(chrome(r, "consumers"), v))
	return nil
}

// consumerCompensationsShown bounds the daemon's actions the consumers page lists.
const consumerCompensationsShown = 50
