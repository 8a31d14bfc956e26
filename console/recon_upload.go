package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/access"
	"github.com/idemops/idemops/audit"
	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/reconcile"
	"github.com/idemops/idemops/templates"
)

// Statement upload: uploadStatement is the one action; the page shows the run, the API answers
// it as JSON.

type uploadRequest struct {
	Channel, Format, BillDate, Job string
}

// openUpload reads the upload's fields and opens its file; an oversized body is ErrTooLarge.
func (s *Server) openUpload(c *gin.Context) (uploadRequest, multipart.File, error) {
	u := uploadRequest{Channel: strings.TrimSpace(c.PostForm("channel")), Format: strings.TrimSpace(c.PostForm("format")),
		BillDate: strings.TrimSpace(c.PostForm("bill_date")), Job: strings.TrimSpace(c.PostForm("job"))}
	fh, err := c.FormFile(reconStatementFile)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return u, nil, errs.Errorf("statement: over the %d MiB limit: %w", s.cfg.UploadLimit>>20, ErrTooLarge)
		}
		return u, nil, inputErr(reconStatementFile, "attach the statement file")
	}
	if fh.Size > s.cfg.UploadLimit {
		return u, nil, errs.Errorf("statement: %d bytes, over the %d MiB limit: %w", fh.Size, s.cfg.UploadLimit>>20, ErrTooLarge)
	}
	f, err := fh.Open()
	if err != nil {
		return u, nil, fmt.Errorf("open upload: %w", err)
	}
	return u, f, nil
}

// reconcileUpload imports and matches an uploaded statement on a new run; the run is returned
// with any error (nil when none was created). The upload is audited with its outcome.
func (s *Server) reconcileUpload(ctx context.Context, r *request, u uploadRequest, src io.Reader) (*reconcile.Run, error) {
	if u.Channel == "" {
		return nil, inputErr("channel", "name the channel the statement is from")
	}
	if u.Format == "" {
		return nil, inputErr("format", "choose the statement's format")
	}
	// Only an operator of every tenant of the channel account imports into it: refused (403,
	// audited) before anything is written.
	if err := s.authorize(ctx, r, "reconcile.statement.upload", access.ObjChannel, u.Channel); err != nil {
		return nil, err
	}
	if u.Job != "" {
		if err := s.authorize(ctx, r, "reconcile.statement.upload", access.ObjReconJob, u.Job); err != nil {
			return nil, err
		}
	}
	req := reconcile.RunRequest{Import: reconcile.ImportRequest{Channel: u.Channel, Format: u.Format, BillDate: u.BillDate,
		Importer: r.op.Actor()}}
	if u.Job != "" {
		j, err := s.recon.GetJob(ctx, u.Job)
		if err != nil {
			return nil, err
		}
		req.Job = j
	}
	var run *reconcile.Run
	var err error
	if packed, size, ok := sizedReaderAt(src); ok {
		run, err = s.recon.ReconcilePacked(ctx, req, packed, size, nil) // gzip and zip bills too
	} else {
		run, err = s.recon.Reconcile(ctx, req, src, nil)
	}
	detail := map[string]any{"channel": u.Channel, "format": u.Format, "bill_date": u.BillDate, "outcome": "ok"}
	target := "recon_run:"
	if run != nil {
		target += strconv.FormatInt(run.ID, 10)
		detail["rows_loaded"] = run.RowsLoaded
	}
	if err != nil {
		detail["outcome"] = "error: " + truncate(publicMessage(err), 200)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.QueryTimeout)
	defer cancel()
	if aerr := s.audit.Append(actx, nil, audit.Entry{Actor: r.op.Actor(), IP: r.ip, Action: "reconcile.statement.upload",
		Target: target, Tenants: s.channelAuditTenants(actx, u.Channel), Detail: detail}); aerr != nil && err == nil {
		return run, aerr
	}
	return run, err
}

// uploadStatement is the upload action both handlers share: it reads the multipart fields and
// the file, then imports and matches the statement under uploadTimeout (reconcileUpload). The
// run is returned with any error; no run is an error.
func (s *Server) uploadStatement(c *gin.Context, r *request) (*reconcile.Run, error) {
	u, f, err := s.openUpload(c)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(c.Request.Context(), uploadTimeout)
	defer cancel()
	run, err := s.reconcileUpload(ctx, r, u, f)
	if run == nil && err == nil {
		err = errors.New("reconcile returned no run")
	}
	return run, err
}

// uploadPage is POST /reconcile/upload (operators): multipart channel, format, bill_date, job
// and the statement file; the run is shown afterwards (with the error that stopped it).
func (s *Server) uploadPage(c *gin.Context, r *request) error {
	run, err := s.uploadStatement(c, r)
	if run == nil {
		return err
	}
	v := runView(*run)
	if err != nil {
		v.Error = pageMessage(c.Request.Context(), err)
		s.render(c, statusOf(err), templates.ReconRunPage(chrome(r, "reconcile"), v))
		return nil
	}
	c.Redirect(http.StatusSeeOther, v.Run.Href)
	return nil
}

// apiUpload is POST /api/v1/reconcile/statements (operators): the upload form's multipart
// fields; the run is answered (with the error that stopped it, in its status).
func (s *Server) apiUpload(c *gin.Context, r *request) error {
	run, err := s.uploadStatement(c, r)
	if run == nil {
		return err
	}
	if err != nil {
		status := statusOf(err)
		if status == http.StatusInternalServerError {
			return err
		}
		c.JSON(status, gin.H{"error": publicMessage(err), "status": status, "run": run})
		return nil
	}
	c.JSON(http.StatusCreated, run)
	return nil
}

// sizedReaderAt gives an upload (a multipart.File: in memory or a temporary file) as a ReaderAt
// with its size, which unpacking a zip needs.
func sizedReaderAt(r io.Reader) (io.ReaderAt, int64, bool) {
	type readSeekerAt interface {
		io.ReaderAt
		io.Seeker
	}
	f, ok := r.(readSeekerAt)
	if !ok {
		return nil, 0, false
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, 0, false
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, false
	}
	return f, size, true
}
