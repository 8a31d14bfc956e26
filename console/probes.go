package console

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

func (s *Server) healthz(c *gin.Context, _ *request) error {
	c.String(http.StatusOK, "ok\n")
	return nil
}

// readyz answers 200 once the database answers a ping within 2 s.
func (s *Server) readyz(c *gin.Context, _ *request) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	sqlDB, err := s.db.DB()
	if err == nil {
		err = sqlDB.PingContext(ctx)
	}
	if err != nil {
		s.cfg.Logger.Warn("readyz: database unreachable", "err", err)
		c.String(http.StatusServiceUnavailable, "database unreachable\n")
		return nil
	}
	c.String(http.StatusOK, "ready\n")
	return nil
}

func (s *Server) static(c *gin.Context, _ *request) error {
	file := c.Param("file")
	f, err := staticFS().Open(file)
	if err != nil {
		return fmt.Errorf("static %s: %w", file, ErrNotFound)
	}
	st, err := f.Stat()
	f.Close()
	if err != nil || st.IsDir() {
		return fmt.Errorf("static %s: %w", file, ErrNotFound)
	}
	c.Header("Cache-Control", "public, max-age=3600")
	c.FileFromFS(file, staticFS())
	return nil
}
