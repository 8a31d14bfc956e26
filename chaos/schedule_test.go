package chaos

import (
	"slices"
	"testing"
	"time"
)

// The same seed gives the same schedule; another seed another one; every kind lands once in
// each minute, inside the traffic window, in time order.
func TestSchedule_SeededAndComplete(t *testing.T) {
	a, b := Schedule(42, 3*time.Minute, false), Schedule(42, 3*time.Minute, false)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, two schedules:\n%v\n%v", a, b)
	}
	if c := Schedule(43, 3*time.Minute, false); slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 drew the same schedule")
	}
	if len(a) != 3*len(ScheduledKinds) {
		t.Fatalf("%d faults in 3 minutes, want %d", len(a), 3*len(ScheduledKinds))
	}
	for m := range 3 {
		seen := map[string]int{}
		for _, f := range a {
			if f.At >= time.Duration(m)*time.Minute && f.At < time.Duration(m+1)*time.Minute {
				seen[f.Kind]++
			}
		}
		for _, k := range ScheduledKinds {
			if seen[k] != 1 {
				t.Errorf("minute %d: %s drawn %d times, want once", m, k, seen[k])
			}
		}
	}
	for i, f := range a {
		if f.At <= 0 || f.At >= 3*time.Minute-4*time.Second || (i > 0 && f.At < a[i-1].At) {
			t.Errorf("fault %d at %v: outside the window or out of order", i, f.At)
		}
		if f.Kind == KindKillService && f.Target != "payments-1" && f.Target != "payments-2" {
			t.Errorf("kill-service aimed at %q", f.Target)
		}
	}
	if short := Schedule(1, 15*time.Second, false); len(short) != len(ScheduledKinds) || short[len(short)-1].At >= 15*time.Second {
		t.Errorf("a 15 s run: %v", short)
	}
	// With HA the primary is killed once, in the first minute, and nothing else moves.
	ha := Schedule(42, 3*time.Minute, true)
	var rest []PlannedFault
	kills := 0
	for _, f := range ha {
		if f.Kind == KindKillPGPrimary {
			kills++
			if f.At >= time.Minute {
				t.Errorf("kill-pg-primary at %v, want the first minute", f.At)
			}
			continue
		}
		rest = append(rest, f)
	}
	if kills != 1 || !slices.Equal(rest, a) {
		t.Errorf("HA schedule: %d primary kills; the rest equal to the single-cluster one: %v", kills, slices.Equal(rest, a))
	}
}
