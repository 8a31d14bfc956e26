package history

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemops/idemops/chaos/report"
)

// op is one operation of a synthetic history on key k, from call to ret.
func op(k string, kind Kind, intent string, out Output, call, ret int64) porcupine.Operation {
	return porcupine.Operation{Input: Input{Key: k, Kind: kind, Intent: intent}, Output: out, Call: call, Return: ret}
}

func final(answer string) Output { return Output{Class: Final, Answer: answer} }

var (
	unknown  = Output{Class: Unknown}
	mismatch = Output{Class: Mismatch}
	expired  = Output{Class: Expired}
)

func TestCheck_HistoriesTheKeyStoreMayProduce(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"a retry replays the first answer": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Call, "A", final("201 pay_1"), 20, 30),
			op("k", Count, "", Output{Executions: 1}, 40, 41)},
		"a lost first attempt, then the other amount is a first intent": {
			op("k", Call, "A", unknown, 0, 10), op("k", Call, "B", final("201 pay_1"), 20, 30)},
		"a lost first attempt that recorded its intent refuses the other amount": {
			op("k", Call, "A", unknown, 0, 10), op("k", Call, "B", mismatch, 20, 30), op("k", Call, "A", final("201 pay_1"), 40, 50)},
		"concurrent duplicates: the mismatch may come first in real time": {
			op("k", Call, "B", mismatch, 0, 30), op("k", Call, "A", final("201 pay_1"), 5, 10)},
		"a tombstone answers expired, and after the row goes the channel's answer again": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Purge, "", Output{Tombstoned: true}, 20, 30),
			op("k", Call, "A", expired, 40, 50), op("k", Purge, "", Output{Deleted: true}, 60, 70),
			op("k", Call, "A", final("201 pay_1"), 80, 90), op("k", Count, "", Output{Executions: 1}, 100, 101)},
		"a declined key's answer lapses by time, then it stays expired": {
			op("k", Call, "A", final("402 declined"), 0, 10), op("k", Call, "A", expired, 20, 30),
			op("k", Call, "A", expired, 40, 50)},
		"a declined key never reached 2xx and executed once": {
			op("k", Call, "A", final("402"), 0, 10), op("k", Count, "", Output{Executions: 1}, 20, 21)},
	} {
		t.Run(name, func(t *testing.T) {
			v := Check(h, 10*time.Second, "")
			if v.Result != report.LinearizableOK || v.Operations != len(h) || v.Partitions != 1 {
				t.Fatalf("got %+v, want ok over %d operations", v, len(h))
			}
		})
	}
}

func TestCheck_HistoriesThatBreakTheContractAreIllegal(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"two different 2xx answers under one key (executed twice)": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Call, "A", final("201 pay_2"), 20, 30)},
		"a key reused with another amount answered 2xx": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Call, "B", final("201 pay_1"), 20, 30)},
		"a mismatch for a key nobody used before": {
			op("k", Call, "B", mismatch, 0, 10)},
		"two executions downstream": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Count, "", Output{Executions: 2}, 20, 21)},
		"a 2xx with nothing executed downstream": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Count, "", Output{Executions: 0}, 20, 21)},
		"a tombstoned key answered 2xx (executed again)": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Purge, "", Output{Tombstoned: true}, 20, 30),
			op("k", Call, "A", final("201 pay_1"), 40, 50)},
		"a purged key executed again": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Purge, "", Output{Deleted: true}, 20, 30),
			op("k", Call, "A", final("201 pay_9"), 40, 50)},
		"a lapsed refusal answered again (executed again without a purge)": {
			op("k", Call, "A", final("402 declined"), 0, 10), op("k", Call, "A", expired, 20, 30),
			op("k", Call, "A", final("402 declined"), 40, 50)},
		"a 2xx answer expired with no purge": {
			op("k", Call, "A", final("201 pay_1"), 0, 10), op("k", Call, "A", expired, 20, 30)},
	} {
		t.Run(name, func(t *testing.T) {
			ok := op("other", Call, "A", final("201 pay_x"), 0, 100) // a key that is fine beside it
			dir := t.TempDir()
			v := Check(append(h, ok), 10*time.Second, dir)
			if v.Result != "illegal" || len(v.Keys) != 1 || v.Keys[0] != "k" {
				t.Fatalf("got %+v, want illegal naming key k", v)
			}
			if v.Visualization != VisualizationFile {
				t.Fatalf("no visualisation: %+v", v)
			}
			if fi, err := os.Stat(filepath.Join(dir, VisualizationFile)); err != nil || fi.Size() == 0 {
				t.Fatalf("visualisation file: %v", err)
			}
		})
	}
}

func TestRecorder_RecordsInvocationAndReturn(t *testing.T) {
	r := NewRecorder()
	done := r.Begin(Input{Key: "k", Kind: Call, Intent: "A"})
	done(final("201 pay_1"))
	ops := r.Operations()
	if len(ops) != 1 || ops[0].Return < ops[0].Call || ops[0].Output.(Output).Answer != "201 pay_1" {
		t.Fatalf("got %+v", ops)
	}
}

func TestCheck_NaturalKeyIsASet(t *testing.T) {
	created := func(id string) Output { return Output{Class: Final, Answer: "created " + id} }
	exists := func(id string) Output { return Output{Class: Final, Answer: "exists " + id} }
	removed, absent := Output{Class: Final, Answer: "removed"}, Output{Class: Final, Answer: "absent"}
	k := "likes|acme|a1|u1"
	legal := map[string][]porcupine.Operation{
		"like, duplicate, unlike, like again": {
			op(k, Like, "", created("1"), 0, 10), op(k, Like, "", exists("1"), 20, 30), op(k, Unlike, "", removed, 40, 50),
			op(k, Unlike, "", absent, 60, 70), op(k, Like, "", created("2"), 80, 90), op(k, Count, "", Output{Executions: 1}, 100, 101)},
		"concurrent likes: one creates, the other answers it": {
			op(k, Like, "", exists("1"), 0, 30), op(k, Like, "", created("1"), 5, 40), op(k, Count, "", Output{Executions: 1}, 50, 51)},
		"an unanswered unlike may or may not have removed it": {
			op(k, Like, "", created("1"), 0, 10), op(k, Unlike, "", Output{Class: Unknown}, 20, 30), op(k, Count, "", Output{Executions: 0}, 40, 41)},
	}
	for name, h := range legal {
		if v := Check(h, 10*time.Second, ""); v.Result != report.LinearizableOK {
			t.Errorf("%s: got %+v, want ok", name, v)
		}
	}
	illegal := map[string][]porcupine.Operation{
		"two rows created under one natural key": {
			op(k, Like, "", created("1"), 0, 10), op(k, Like, "", created("2"), 20, 30)},
		"a duplicate answered with another row": {
			op(k, Like, "", created("1"), 0, 10), op(k, Like, "", exists("2"), 20, 30)},
		"removed twice": {
			op(k, Like, "", created("1"), 0, 10), op(k, Unlike, "", removed, 20, 30), op(k, Unlike, "", removed, 40, 50)},
		"a row left after the last unlike": {
			op(k, Like, "", created("1"), 0, 10), op(k, Unlike, "", removed, 20, 30), op(k, Count, "", Output{Executions: 1}, 40, 41)},
	}
	for name, h := range illegal {
		if v := Check(h, 10*time.Second, ""); v.Result != "illegal" {
			t.Errorf("%s: got %+v, want illegal", name, v)
		}
	}
}
