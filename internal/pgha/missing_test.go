package pgha

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Without the packages, Start and StartBouncer fail at once with one line that names what to
// install, and leave nothing behind.
func TestStart_MissingPackagesSayWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	autoctl, bouncer := autoctlFallback, bouncerFallback
	autoctlFallback, bouncerFallback = "/nonexistent/pg_autoctl", "/nonexistent/pgbouncer"
	defer func() { autoctlFallback, bouncerFallback = autoctl, bouncer }()

	_, err := Start(context.Background(), Options{})
	if !errors.Is(err, ErrNoAutoctl) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "postgresql-15-auto-failover") {
		t.Fatalf("Start without pg_autoctl: %v", err)
	}
	_, err = StartBouncer(context.Background(), BouncerOptions{Host: "127.0.0.1", Port: 1})
	if !errors.Is(err, ErrNoBouncer) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "apt-get install pgbouncer") {
		t.Fatalf("StartBouncer without pgbouncer: %v", err)
	}
}
