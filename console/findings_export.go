package console

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/xuri/excelize/v2"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/money"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Export: what the findings page's filter matches, as CSV (streamed from the database, row by
// row) or XLSX (excelize's stream writer), with the page's columns; amounts as decimal strings
// beside their currency, times in the operator's zone with the offset. At most
// Config.FindingsExportCap rows: above it the export is refused, naming the cap, before
// anything is written. Audited (reconcile.findings.export) with the filter and the count.

// FindingsExportCap is the default bound on one export (Config.FindingsExportCap).
const FindingsExportCap = 100_000

// exportColumns are the export's columns (the findings table's, spelled out), English: the
// header row says them in the operator's language.
var exportColumns = []string{"Finding", "Run", "Kind", "Channel", "Bill date", "Merchant order no", "Amount", "Currency",
	"Key", "Tenant", "Subject", "Channel says", "Local says", "Statement line", "State", "Reason", "Resolved by", "Note", "Found at"}

// exportRow is a finding as the export's cells.
func exportRow(f *reconcile.Finding, loc *time.Location) []string {
	amount, currency := "", strp(f.Currency)
	if f.AmountMinor != nil && f.Currency != nil {
		amount = money.Format(*f.AmountMinor, *f.Currency)
	}
	key := ""
	if f.KeyID != nil {
		key = strconv.FormatInt(*f.KeyID, 10)
	}
	channel, local, line := findingSides(*f)
	lineText := ""
	if line != 0 {
		lineText = strconv.FormatInt(line, 10)
	}
	reason := strp(f.ReasonCode)
	return []string{strconv.FormatInt(f.ID, 10), strconv.FormatInt(f.RunID, 10), string(f.Kind), f.Channel, f.BillDate,
		strp(f.MerchantOrderNo), amount, currency, key, strp(f.Tenant), f.Subject, sideText(channel), sideText(local), lineText, string(f.State),
		reason, strp(f.Resolver), strp(f.Note), f.CreatedAt.In(loc).Format(time.RFC3339)}
}

// exportFindings writes what q's filter matches that op may see, in format (csv, xlsx), to w
// (header first, through start, which may still refuse). The one export: the page's download
// and the API's.
func (s *Server) exportFindings(ctx context.Context, op *access.Operator, ip string, q url.Values, format string,
	start func(contentType, filename string), w io.Writer) error {
	if format != "csv" && format != "xlsx" {
		return inputErr("format", "is csv or xlsx")
	}
	q.Del("before")
	q.Del("limit")
	f, _, err := parseFindingFilter(q)
	if err != nil {
		return err
	}
	if f, err = s.visibleTo(ctx, op, f); err != nil {
		return err
	}
	limit := s.cfg.FindingsExportCap
	counts, err := eachCell(ctx, s.cells.everywhere(), func(ctx context.Context, c scopedCell) (int64, error) {
		return c.recon.CountMatching(ctx, f, int(limit))
	})
	if err != nil {
		return err
	}
	var n int64
	for _, c := range counts {
		n += c
	}
	if n > limit {
		return errs.Refusedf("more than %d findings match; an export holds at most %d: narrow the filter (state, kind, channel, bill date)",
			limit, limit)
	}
	if err := s.audit.Append(ctx, nil, audit.Entry{Actor: op.Actor(), IP: ip, Action: "reconcile.findings.export",
		Target: "findings", Tenants: op.Tenants, Detail: map[string]any{"filter": f.Describe(), "format": format, "findings": n}}); err != nil {
		return err
	}
	loc, err := templates.LoadZone(op.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	lang := templates.LangOf(ctx)
	header := make([]string, len(exportColumns))
	for i, c := range exportColumns {
		header[i] = templates.Translate(lang, c)
	}
	name := "findings-" + time.Now().In(loc).Format("20060102-150405") + "." + format
	if format == "csv" {
		start("text/csv; charset=utf-8", name)
		// A UTF-8 byte order mark: spreadsheet programs then read the Chinese as UTF-8.
		if _, err := io.WriteString(w, "\ufeff"); err != nil {
			return err
		}
		cw := csv.NewWriter(w)
		if err := cw.Write(header); err != nil {
			return err
		}
		rows := 0
		err := s.eachFindingIn(ctx, f, int(limit), func(fd *reconcile.Finding) error {
			if err := cw.Write(exportRow(fd, loc)); err != nil {
				return err
			}
			if rows++; rows%500 == 0 {
				cw.Flush()
				return cw.Error()
			}
			return nil
		})
		cw.Flush()
		if err != nil {
			return err
		}
		return cw.Error()
	}
	x := excelize.NewFile()
	defer x.Close()
	sheet := templates.Translate(lang, "Findings")
	if err := x.SetSheetName("Sheet1", sheet); err != nil {
		return err
	}
	sw, err := x.NewStreamWriter(sheet)
	if err != nil {
		return err
	}
	cells := func(ss []string) []any {
		out := make([]any, len(ss))
		for i, v := range ss {
			out[i] = v // strings: an amount stays the exact decimal it is, never a float
		}
		return out
	}
	if err := sw.SetRow("A1", cells(header)); err != nil {
		return err
	}
	row := 1
	err = s.eachFindingIn(ctx, f, int(limit), func(fd *reconcile.Finding) error {
		row++
		cell, err := excelize.CoordinatesToCellName(1, row)
		if err != nil {
			return err
		}
		return sw.SetRow(cell, cells(exportRow(fd, loc)))
	})
	if err != nil {
		return err
	}
	if err := sw.Flush(); err != nil {
		return err
	}
	start("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", name)
	return x.Write(w)
}

// exportTimeout bounds an export (a hundred thousand rows).
const exportTimeout = 5 * time.Minute

// findingsExport is GET /reconcile/findings/export?format=csv|xlsx&<the page's filter>: the
// download. A refusal (over the cap, a bad filter) comes back as the findings page saying why.
func (s *Server) findingsExport(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), exportTimeout)
	defer cancel()
	q := c.Request.URL.Query()
	err := s.exportFindings(ctx, r.op, r.ip, q, q.Get("format"), exportStart(c), c.Writer)
	if err == nil || c.Writer.Written() {
		return err
	}
	status := statusOf(err)
	if status != http.StatusBadRequest && status != http.StatusConflict {
		return err
	}
	v, verr := s.findingsView(ctx, r, c.Request.URL.Query(), nil)
	if verr != nil && !isFormError(verr) {
		return verr
	}
	v.Error = pageMessage(c.Request.Context(), err)
	s.render(c, status, templates.FindingsPage(chrome(r, "reconcile"), v))
	return nil
}

// apiFindingsExport is GET /api/v1/reconcile/findings/export?format=csv|xlsx&<filter>.
func (s *Server) apiFindingsExport(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), exportTimeout)
	defer cancel()
	q := c.Request.URL.Query()
	return s.exportFindings(ctx, r.op, r.ip, q, q.Get("format"), exportStart(c), c.Writer)
}

// exportStart sets a download's headers.
func exportStart(c *gin.Context) func(contentType, filename string) {
	return func(contentType, filename string) {
		c.Header("Content-Type", contentType)
		c.Header("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, filename))
		c.Header("Cache-Control", "no-store")
		c.Status(http.StatusOK)
	}
}

// ExportFindings writes what the findings filter q matches that op may see, as format (csv,
// xlsx), to w: the command line's `findings export`, the same export as the page's.
func (s *Server) ExportFindings(ctx context.Context, op *access.Operator, q url.Values, format string, w io.Writer) error {
	ctx = access.Bind(ctx, op) // row-level security: op's tenants
	return s.exportFindings(ctx, op, "", q, format, func(string, string) {}, w)
}
