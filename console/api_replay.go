package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/errs"
	"github.com/idemops/idemops/internal/inputcheck"
	"github.com/idemops/idemops/replay"
)

// The replay API: the same guards and roles as the pages, for automation with bearer tokens.
// A confirmation is two calls: GET the preview (it carries the token), POST the token with a
// reason.

// bindJSON reads a small JSON body into v; a bad one is an input error naming the body, a
// string with a NUL byte or bytes that are not UTF-8 one naming its field, and a body past the
// limit is ErrTooLarge. Every JSON body of the API is read here.
func bindJSON(c *gin.Context, v any) error {
	raw, err := io.ReadAll(c.Request.Body)
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return errs.Errorf("body: over the %d-byte limit: %w", mbe.Limit, ErrTooLarge)
	}
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if err := inputcheck.JSON(raw); err != nil {
		return inputErrFrom(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return inputErr("body", "must be a JSON object with the documented fields (%s)", truncate(err.Error(), 120))
	}
	return nil
}

// apiReplayPreview is GET /api/v1/keys/{id}/replay.
func (s *Server) apiReplayPreview(c *gin.Context, r *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.QueryTimeout+s.cfg.LookupTimeout)
	defer cancel()
	_, p, err := s.previewAction(ctx, c, r)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, p)
	return nil
}

type confirmBody struct {
	Token  string `json:"token"`
	Reason string `json:"reason"`
}

// apiReplayConfirm is POST /api/v1/keys/{id}/replay {token, reason}: 201 with the request; 200
// with the same request when the token was used before (nothing is executed again); 409 with
// the reason when a guard refuses.
func (s *Server) apiReplayConfirm(c *gin.Context, r *request) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	var b confirmBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	req, dup, err := s.confirm(c, r, id, b.Token, b.Reason)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if dup {
		status = http.StatusOK
	}
	c.JSON(status, gin.H{"request": req, "duplicate": dup})
	return nil
}

// apiMarkFinal is POST /api/v1/keys/{id}/final {token, reason} (administrators; the token is
// the preview's final_token).
func (s *Server) apiMarkFinal(c *gin.Context, r *request) error {
	return s.apiKeyAction(c, r, s.markFinal)
}

// apiRelease is POST /api/v1/keys/{id}/release {token, reason} (administrators; the token is
// the release_token of GET /api/v1/keys/{id}/final).
func (s *Server) apiRelease(c *gin.Context, r *request) error {
	return s.apiKeyAction(c, r, s.releaseForRetry)
}

// apiKeyAction answers an administrator's key action taking {token, reason} with the key after it.
func (s *Server) apiKeyAction(c *gin.Context, r *request, act keyAction) error {
	var b confirmBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	k, err := s.runKeyAction(c, r, act, b.Token, b.Reason)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"id": k.ID, "state": k.State, "version": k.Version})
	return nil
}

// apiFinalToken is GET /api/v1/keys/{id}/final (administrators): the tokens a mark-final
// (token) and a release for retry (release_token) confirm, bound to the key's current version.
func (s *Server) apiFinalToken(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	k, err := s.keyParam(ctx, c, r)
	if err != nil {
		return err
	}
	out := gin.H{"id": k.ID, "state": k.State, "version": k.Version, "allowed": k.Replayable(), "refusal": k.ReplayRefusal()}
	if k.Replayable() {
		out["token"] = s.replays.ConfirmToken(replay.ActionFinal, r.op.ID, k.ID, k.Version)
		out["release_token"] = s.replays.ConfirmToken(replay.ActionRelease, r.op.ID, k.ID, k.Version)
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// apiReplay is GET /api/v1/replays/{id}.
func (s *Server) apiReplay(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	req, err := s.replayParam(ctx, c, r)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, req)
	return nil
}

// apiReplayApprove is POST /api/v1/replays/{id}/approve: a second operator approves and the
// replay runs; 403 for the requester.
func (s *Server) apiReplayApprove(c *gin.Context, r *request) error {
	req, err := s.approve(c, r)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, req)
	return nil
}

// apiBulkPreview is POST /api/v1/replays/bulk {"filter": {"state": "failed_retryable", ...}, "ids": [..]}:
// the key search's filters (as on GET /api/v1/keys), or the keys picked by id; 200 with the
// preview (keys, versions, predictions, counts) and the plan and token that start it. Writes nothing.
func (s *Server) apiBulkPreview(c *gin.Context, r *request) error {
	var b struct {
		Filter map[string]string `json:"filter"`
		IDs    []int64           `json:"ids"`
	}
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range b.Filter {
		q.Set(k, v)
	}
	f, err := bulkFilter(q)
	if err != nil {
		return err
	}
	if len(b.IDs) > s.cfg.BulkCap {
		return inputErr("ids", "%d keys selected; a bulk replay takes at most %d", len(b.IDs), s.cfg.BulkCap)
	}
	p, err := s.previewBulk(c, r, f, b.IDs)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, p)
	return nil
}

// apiBulk is GET /api/v1/replays/bulk/{id}: the run, its progress and its per-key results.
func (s *Server) apiBulk(c *gin.Context, r *request) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	run, items, err := s.bulkParam(ctx, c, r)
	if err != nil {
		return err
	}
	if items == nil {
		items = []replay.BulkItem{}
	}
	c.JSON(http.StatusOK, gin.H{"run": run, "items": items})
	return nil
}

// apiBulkStart is POST /api/v1/replays/bulk/start {plan, token, reason} (plan and token from the
// preview): 202 with the run, created and handed to the daemon in one step; poll GET for progress.
func (s *Server) apiBulkStart(c *gin.Context, r *request) error {
	var b struct {
		Plan   string `json:"plan"`
		Token  string `json:"token"`
		Reason string `json:"reason"`
	}
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	run, err := s.startBulk(c, r, b.Plan, b.Token, b.Reason)
	if err != nil {
		return err
	}
	c.JSON(http.StatusAccepted, run)
	return nil
}
