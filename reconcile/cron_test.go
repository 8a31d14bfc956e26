package reconcile_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/reconcile"
)

// TestCron_DaemonSchedulesAndReconJobsAgree: a recon job's spec and a daemon schedule's spec are
// read by one parser, so each spec is accepted by both or refused by both — seconds fields and
// @every included, the host's Local zone and never-firing dates refused — and a recon job's
// refusal names its own field.
func TestCron_DaemonSchedulesAndReconJobsAgree(t *testing.T) {
	for _, c := range []struct {
		spec, zone string
		ok         bool
		field      string // the recon job's field named when refused
	}{
		{"*/5 * * * *", "UTC", true, ""},
		{"0 11 * * *", "Asia/Shanghai", true, ""},
		{"30 0 3 * * *", "Europe/Berlin", true, ""}, // seconds: the daemon always took them, recon jobs did not
		{"@every 10m", "", true, ""},
		{"@daily", "UTC", true, ""},
		{"", "UTC", false, "cron_spec"},
		{"every day", "UTC", false, "cron_spec"},
		{"61 * * * *", "UTC", false, "cron_spec"},
		{"0 0 30 2 *", "UTC", false, "cron_spec"}, // never fires: recon jobs used to accept it
		{"CRON_TZ=UTC 0 1 * * *", "UTC", false, "cron_spec"},
		{"0 3 * * *", "Mars/Olympus", false, "time_zone"},
		{"0 3 * * *", "Local", false, "time_zone"}, // the host's zone: recon jobs used to accept it
	} {
		derr := daemon.ValidateSchedule(c.spec, c.zone)
		_, rerr := reconcile.ParseCron(c.spec, c.zone)
		if (derr == nil) != c.ok || (rerr == nil) != c.ok {
			t.Errorf("%q in %q: daemon %v, recon job %v; want both accepted=%v", c.spec, c.zone, derr, rerr, c.ok)
			continue
		}
		if c.ok {
			continue
		}
		if !errors.Is(derr, daemon.ErrInvalidSchedule) || !errors.Is(rerr, reconcile.ErrInvalid) ||
			!strings.Contains(rerr.Error(), c.field+":") || strings.ContainsAny(derr.Error()+rerr.Error(), "\r\n") {
			t.Errorf("%q in %q: daemon %v, recon job %v; want one-line refusals, the job's naming %s", c.spec, c.zone, derr, rerr, c.field)
		}
	}
}
