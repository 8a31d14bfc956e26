package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemops/idemops/replay"
)

// startBulk starts a previewed bulk replay as a daemon job (POST /replays/bulk/start, POST
// /api/v1/replays/bulk/start): across cells, a run in each cell holding its keys.
func (s *Server) startBulk(c *gin.Context, r *request, plan, token, reason string) ([]*replay.BulkRun, error) {
	ctx, cancel := s.ctx(c)
	defer cancel()
	return s.startBulkIn(ctx, actorOf(r), plan, token, reason)
}

// bulkStartPage is POST /replays/bulk/start {plan, token, reason}: creates the previewed run and
// hands it to the daemon in one step, then shows its progress.
func (s *Server) bulkStartPage(c *gin.Context, r *request) error {
	runs, err := s.startBulk(c, r, c.PostForm("plan"), c.PostForm("token"), c.PostForm("reason"))
	if err != nil {
		return err
	}
	// Across cells the first run's page links the others (?with=ID,…).
	c.Redirect(http.StatusSeeOther, fmt.Sprintf("/replays/bulk/%d", runs[0].ID)+withRuns(runs[1:]))
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
	runs, err := s.startBulk(c, r, b.Plan, b.Token, b.Reason)
	if err != nil {
		return err
	}
	if len(runs) == 1 {
		c.JSON(http.StatusAccepted, runs[0])
		return nil
	}
	c.JSON(http.StatusAccepted, gin.H{"runs": runs}) // across cells: a run in each cell holding its keys
	return nil
}

// withRuns is the query naming the other runs of one bulk replay ("" for none).
func withRuns(runs []*replay.BulkRun) string {
	if len(runs) == 0 {
		return ""
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = strconv.FormatInt(r.ID, 10)
	}
	return "?with=" + strings.Join(ids, ",")
}
