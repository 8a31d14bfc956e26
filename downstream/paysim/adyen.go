package paysim

import (
	"bytes"
	"sort"
	"strconv"
	"time"
)

// adyenHeader is the settlement details report's columns.
var adyenHeader = []string{"Company Account", "Merchant Account", "Psp Reference", "Merchant Reference",
	"Payment Method", "Creation Date", "TimeZone", "Type", "Modification Reference", "Gross Currency",
	"Gross Debit (GC)", "Gross Credit (GC)", "Exchange Rate", "Net Currency", "Net Debit (NC)", "Net Credit (NC)",
	"Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)", "Payment Method Variant",
	"Modification Merchant Reference", "Batch Number"}

// adyenSettlement renders one settlement batch for the day: Settled rows (Gross Credit, net of
// commission), Refunded rows (Gross Debit), and a closing MerchantPayout row per net currency
// carrying the day's net total — the batch's control total.
func (s *Server) adyenSettlement(d day, entries []entry) ([]byte, error) {
	batch := strconv.FormatInt(d.start.Unix()/86400, 10)
	rows := [][]string{adyenHeader}
	net := map[string]int64{}
	for _, e := range entries {
		c := e.charge
		cur := c.Currency
		row := []string{s.cfg.AdyenCompany, s.cfg.AdyenMerchant, c.ID, c.MerchantOrderNo, "visa",
			e.at.Format(stampLayout), "UTC", "Settled", "", cur, "", "", "1", cur, "", "", "", "", "", "", "visa", "", batch}
		if r := e.refund; r != nil {
			row[7], row[8], row[21] = "Refunded", r.ID, r.MerchantRefundNo
			row[10], row[14] = formatMinor(r.AmountMinor, cur), formatMinor(r.AmountMinor, cur)
			net[cur] -= r.AmountMinor
		} else {
			fee := s.fee(e)
			row[11], row[15], row[16] = formatMinor(c.AmountMinor, cur), formatMinor(c.AmountMinor-fee, cur), formatMinor(fee, cur)
			net[cur] += c.AmountMinor - fee
		}
		rows = append(rows, row)
	}
	currencies := make([]string, 0, len(net))
	for cur := range net {
		currencies = append(currencies, cur)
	}
	sort.Strings(currencies)
	closing := d.end.Add(-time.Second).Format(stampLayout)
	for _, cur := range currencies {
		row := []string{s.cfg.AdyenCompany, s.cfg.AdyenMerchant, "", "", "", closing, "UTC", "MerchantPayout", "",
			"", "", "", "", cur, "", "", "", "", "", "", "", "", batch}
		if n := net[cur]; n >= 0 {
			row[14] = formatMinor(n, cur)
		} else {
			row[15] = formatMinor(-n, cur)
		}
		rows = append(rows, row)
	}
	var buf bytes.Buffer
	if err := csvRows(&buf, rows); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
