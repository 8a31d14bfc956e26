package chaos

import (
	"fmt"
	"os"
	"slices"
	"strings"
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

// One cell (or no --cells) draws today's schedule byte for byte: the golden file was written
// by Schedule before cells existed (seeds 1, 22, 42; 15 s, 1 min, 5 min; with and without HA).
func TestSchedule_OneCellIsTodaysScheduleByteForByte(t *testing.T) {
	want, err := os.ReadFile("testdata/schedule-one-cell.golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, cells := range [][]string{nil, {"a"}} {
		var b strings.Builder
		for _, seed := range []int64{1, 22, 42} {
			for _, d := range []time.Duration{15 * time.Second, 60 * time.Second, 5 * time.Minute} {
				for _, ha := range []bool{false, true} {
					fmt.Fprintf(&b, "seed %d duration %v ha %v\n", seed, d, ha)
					for _, f := range ScheduleCells(seed, d, ha, cells) {
						fmt.Fprintf(&b, "%d %s %s\n", int64(f.At), f.Kind, f.Target)
					}
				}
			}
		}
		if got := b.String(); got != string(want) {
			t.Errorf("cells %v: the schedule differs from the golden one (first difference at byte %d)", cells, firstDiff(got, string(want)))
		}
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// With two cells and HA, one cell's primary is killed once, in the first minute, the cell drawn
// from the seed (both cells across seeds); every daemon-leader kill names a cell; every other
// fault is where the one-cell schedule puts it.
func TestScheduleCells_KillsOneCellsPrimaryAndKeepsTheRest(t *testing.T) {
	cells := []string{"a", "b"}
	hit := map[string]int{}
	for seed := range int64(40) {
		one := Schedule(seed, 3*time.Minute, true)
		two := ScheduleCells(seed, 3*time.Minute, true, cells)
		if again := ScheduleCells(seed, 3*time.Minute, true, cells); !slices.Equal(two, again) {
			t.Fatalf("seed %d: two schedules from one seed", seed)
		}
		if len(one) != len(two) {
			t.Fatalf("seed %d: %d faults with cells, %d without", seed, len(two), len(one))
		}
		kills := 0
		for i, f := range two {
			o := one[i]
			switch f.Kind {
			case KindKillCellPrimary:
				kills++
				c := TargetCell(f.Target)
				if !slices.Contains(cells, c) || f.Target != CellTarget(c, "primary") || f.At >= time.Minute {
					t.Errorf("seed %d: %+v", seed, f)
				}
				hit[c]++
				if o.Kind != KindKillPGPrimary || o.At != f.At {
					t.Errorf("seed %d: the cell's primary killed at %v, the one cell's %s at %v", seed, f.At, o.Kind, o.At)
				}
			case KindKillDaemonLeader:
				if !slices.Contains(cells, TargetCell(f.Target)) || o.Kind != f.Kind || o.At != f.At {
					t.Errorf("seed %d: %+v (one cell: %+v)", seed, f, o)
				}
			case KindKillPGPrimary:
				t.Errorf("seed %d: kill-pg-primary drawn with cells", seed)
			default:
				if f != o {
					t.Errorf("seed %d: fault %d is %+v with cells, %+v without", seed, i, f, o)
				}
			}
		}
		if kills != 1 {
			t.Errorf("seed %d: %d cell primaries killed, want 1", seed, kills)
		}
		// Without HA nothing is killed in PostgreSQL.
		for _, f := range ScheduleCells(seed, 3*time.Minute, false, cells) {
			if f.Kind == KindKillCellPrimary || f.Kind == KindKillPGPrimary {
				t.Errorf("seed %d: %s drawn without HA", seed, f.Kind)
			}
		}
	}
	if hit["a"] == 0 || hit["b"] == 0 {
		t.Errorf("over 40 seeds the primary killed was cell a's %d times, cell b's %d times", hit["a"], hit["b"])
	}
	if TargetCell("payments-1") != "" || TargetCell("cell b daemon leader") != "b" {
		t.Error("TargetCell")
	}
}
