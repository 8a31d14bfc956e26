package pgha_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/idemops/idemops/internal/pgha"
)

func TestZSmoke(t *testing.T) {
	t0 := time.Now()
	s, err := pgha.Start(context.Background(), pgha.Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	t.Logf("started in %s: %s", time.Since(t0), s.URL("postgres"))
	p, err := s.Primary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if err := s.Kill(p); err != nil {
		t.Fatal(err)
	}
	n, err := s.WaitPromoted(context.Background(), p)
	t.Logf("promoted %s after %s (%v)", n.Name, time.Since(t1), err)
	st, _ := s.States(context.Background())
	t.Log(st)
	t2 := time.Now()
	s.Stop()
	t.Logf("stopped in %s", time.Since(t2))
}
