package cronspec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemops/idemops/internal/cronspec"
)

// specs: "" in Field means the spec and zone are accepted.
var specs = []struct {
	Spec, Zone, Field, WantIn string
}{
	{"*/5 * * * *", "UTC", "", ""},
	{"0 3 * * *", "Asia/Shanghai", "", ""},
	{"@every 10s", "", "", ""},
	{"@daily", "Europe/Berlin", "", ""},
	{"30 0 3 * * *", "Europe/Berlin", "", ""}, // a leading seconds field
	{"", "UTC", cronspec.FieldSpec, "must not be empty"},
	{"every day", "UTC", cronspec.FieldSpec, `"every day"`},
	{"61 * * * *", "UTC", cronspec.FieldSpec, `"61 * * * *"`},
	{"0 0 30 2 *", "UTC", cronspec.FieldSpec, "never fires"},
	{"TZ=UTC 0 3 * * *", "UTC", cronspec.FieldSpec, "in its own field"},
	{"CRON_TZ=Asia/Shanghai 0 3 * * *", "", cronspec.FieldSpec, "in its own field"},
	{"0 3 * * *", "Mars/Olympus", cronspec.FieldTimeZone, `"Mars/Olympus"`},
	{"0 3 * * *", "Local", cronspec.FieldTimeZone, "IANA"},
}

func TestParse_AcceptsAndRefusesWithOneLineNamingTheField(t *testing.T) {
	for _, c := range specs {
		_, err := cronspec.Parse(c.Spec, c.Zone)
		if c.Field == "" {
			if err != nil {
				t.Errorf("Parse(%q, %q) = %v, want accepted", c.Spec, c.Zone, err)
			}
			continue
		}
		var ce *cronspec.Error
		if !errors.As(err, &ce) || ce.Field != c.Field || !strings.Contains(err.Error(), c.WantIn) || strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("Parse(%q, %q) = %v, want one line on %s containing %q", c.Spec, c.Zone, err, c.Field, c.WantIn)
		}
	}
}

func TestNextRuns_InTheZoneAndBounded(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got, err := cronspec.NextRuns("0 3 * * *", "Asia/Shanghai", from, 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("NextRuns = %v, %v", got, err)
	}
	if !got[0].Equal(time.Date(2026, 1, 1, 19, 0, 0, 0, time.UTC)) || got[0].Location().String() != "Asia/Shanghai" ||
		got[2].Sub(got[0]) != 48*time.Hour {
		t.Errorf("NextRuns = %v, want 03:00 Shanghai daily from 2026-01-01 19:00 UTC", got)
	}
	if got, _ := cronspec.NextRuns("@every 1s", "", from, 1000); len(got) != cronspec.MaxPreview {
		t.Errorf("NextRuns of 1000: %d times, want the cap %d", len(got), cronspec.MaxPreview)
	}
}
