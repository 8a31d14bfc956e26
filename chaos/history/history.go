// Package history records what the chaos run's clients did — every logical operation's
// invocation and return, with its key, intent and answer — and checks the record with
// Porcupine against a model of the key store: per key, at most one execution; every final
// answer equal to the first; a key reused with another intent never answered 2xx; a
// tombstoned or purged key never executed again. Keys are independent, so the history is
// partitioned per key and each key's part is checked alone.
package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemops/idemops/chaos/report"
)

// Kind is what an operation did.
type Kind string

const (
	// Call is a client's logical call under a key (its retries with that key included).
	Call Kind = "call"
	// Purge is a retention pass as one key saw it: it deleted the key, dropped its answer, or
	// neither.
	Purge Kind = "purge"
	// Count reads, after the run, how many times the action behind the key was executed
	// downstream (charges at the channel, deliveries at a non-idempotent receiver).
	Count Kind = "count"
	// Like and Unlike add and remove a like: a natural key (tenant, article, user) on the
	// domain table itself, with no key row. A Final Like answers "created ID" or "exists ID";
	// a Final Unlike "removed" or "absent". Count reads the rows under the natural key after
	// the run.
	Like   Kind = "like"
	Unlike Kind = "unlike"
)

// Class sorts a call's answer.
type Class string

const (
	// Final: a stored final answer (a 2xx, or a final refusal such as a decline); Answer names it.
	Final Class = "final"
	// Mismatch: the key was refused because it was used before with another intent (422).
	Mismatch Class = "mismatch"
	// Expired: the key's answer was dropped by retention; the tombstone answered (410).
	Expired Class = "expired"
	// Unknown: no answer, a 5xx, a timeout, or still in progress: the call may have done anything
	// one attempt may do (record its intent, execute, complete with an answer not seen yet).
	Unknown Class = "unknown"
	// Refused: refused before any claim (bad input, no credential): nothing recorded.
	Refused Class = "refused"
)

// Input is an operation's invocation.
type Input struct {
	Key    string // the partition: path, tenant and key
	Kind   Kind
	Intent string // a digest of the call's intent
}

// Output is an operation's return.
type Output struct {
	Class  Class
	Answer string // Final: status and resource ("201 pay_…")
	// Purge: the pass deleted the key's row, or dropped its answer (a tombstone stays).
	Deleted, Tombstoned bool
	// Count: executions downstream.
	Executions int
}

// state is one key in the model.
type state struct {
	Intent string // the intent the store recorded ("" none yet)
	Answer string // the first final answer any client saw ("" none yet)
	Tomb   bool   // the answer was dropped: a late retry is answered Expired
	// Liked and LikeID: a natural key's row exists, and its id when an answer named it.
	Liked  bool
	LikeID string
}

// step is the model: the states the key may be in after op, from s (none: op is impossible).
func step(s state, in Input, out Output) []state {
	switch in.Kind {
	case Purge:
		switch {
		case out.Deleted:
			// The row went; the channel still holds what was done under the key's downstream
			// key, so a late retry may only ever be answered as before.
			return []state{{Answer: s.Answer}}
		case out.Tombstoned:
			s.Tomb = true
		}
		return []state{s}
	case Count:
		if isLikeKey(in.Key) { // the rows under the natural key: one exactly when liked
			if (s.Liked && out.Executions != 1) || (!s.Liked && out.Executions != 0) {
				return nil
			}
			return []state{s}
		}
		if out.Executions > 1 || (strings.HasPrefix(s.Answer, "2") && out.Executions != 1) {
			return nil
		}
		return []state{s}
	case Like, Unlike:
		return stepLike(s, in, out)
	}
	switch out.Class {
	case Final:
		if (s.Intent != "" && s.Intent != in.Intent) || s.Tomb || (s.Answer != "" && s.Answer != out.Answer) {
			return nil
		}
		return []state{{Intent: in.Intent, Answer: out.Answer}}
	case Mismatch:
		if s.Intent == "" || s.Intent == in.Intent {
			return nil
		}
		return []state{s}
	case Expired:
		// A tombstone answers Expired; so does a refusal's answer once its (short) response
		// period is over, purge or not: the claim reads the deadline, not the purge. A 2xx
		// answer's period is never short enough to lapse within a run.
		lapsed := s.Answer != "" && !strings.HasPrefix(s.Answer, "2")
		if !(s.Tomb || lapsed) || s.Intent != in.Intent {
			return nil
		}
		s.Tomb = true
		return []state{s}
	case Unknown:
		if s.Intent == "" && !s.Tomb {
			recorded := s
			recorded.Intent = in.Intent
			return []state{s, recorded}
		}
		return []state{s}
	}
	return []state{s}
}

// stepLike is the natural key as a set: a like creates the row when there is none and answers
// the one there is otherwise; an unlike removes it.
func stepLike(s state, in Input, out Output) []state {
	liked := state{Liked: true, LikeID: s.LikeID}
	if !s.Liked {
		liked.LikeID = ""
	}
	switch {
	case out.Class == Unknown && in.Kind == Like:
		return []state{s, liked}
	case out.Class == Unknown:
		return []state{s, {}}
	case out.Class != Final:
		return []state{s}
	}
	verb, id, _ := strings.Cut(out.Answer, " ")
	switch verb {
	case "created":
		if s.Liked {
			return nil // a second row under one natural key
		}
		return []state{{Liked: true, LikeID: id}}
	case "exists":
		if !s.Liked || (s.LikeID != "" && s.LikeID != id) {
			return nil
		}
		return []state{{Liked: true, LikeID: id}}
	case "removed":
		if !s.Liked {
			return nil
		}
		return []state{{}}
	case "absent":
		if s.Liked {
			return nil
		}
		return []state{s}
	}
	return nil
}

// isLikeKey says whether a partition is a natural key's (its name starts with "likes|").
func isLikeKey(key string) bool { return strings.HasPrefix(key, "likes|") }

// Model is the key store as Porcupine sees it, one key per partition.
var Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation { return partition(h) },
	Init:      func() []any { return []any{state{}} },
	Step: func(s, in, out any) []any {
		var next []any
		for _, n := range step(s.(state), in.(Input), out.(Output)) {
			next = append(next, n)
		}
		return next
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(Input), out.(Output)
		switch i.Kind {
		case Purge:
			return fmt.Sprintf("purge → deleted %v, tombstoned %v", o.Deleted, o.Tombstoned)
		case Count:
			return fmt.Sprintf("executions downstream → %d", o.Executions)
		case Like, Unlike:
			return fmt.Sprintf("%s → %s %s", i.Kind, o.Class, o.Answer)
		}
		return fmt.Sprintf("call intent %s → %s %s", short(i.Intent), o.Class, o.Answer)
	},
	DescribeState: func(s any) string {
		st := s.(state)
		if st.Liked || st.LikeID != "" {
			return fmt.Sprintf("liked (id %s)", st.LikeID)
		}
		return fmt.Sprintf("intent %s, answer %q, tombstone %v", short(st.Intent), st.Answer, st.Tomb)
	},
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// partition splits a history per key, and numbers each key's operations into client lanes (an
// operation takes the first lane free at its call) so that a visualisation draws each key's
// concurrent calls side by side.
func partition(h []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range h {
		k := op.Input.(Input).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		ops := byKey[k]
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		var lanes []int64 // each lane's last return
		for i := range ops {
			lane := slices.IndexFunc(lanes, func(end int64) bool { return end < ops[i].Call })
			if lane < 0 {
				lane = len(lanes)
				lanes = append(lanes, 0)
			}
			lanes[lane] = ops[i].Return
			ops[i].ClientId = lane
		}
		out = append(out, ops)
	}
	return out
}

// Recorder collects a run's operations; safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

// NewRecorder starts a history; its timestamps count from now (monotonic clock).
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Begin records the invocation of in now; the returned function records its return.
func (r *Recorder) Begin(in Input) func(Output) {
	call := time.Since(r.start).Nanoseconds()
	return func(out Output) {
		ret := time.Since(r.start).Nanoseconds()
		r.mu.Lock()
		r.ops = append(r.ops, porcupine.Operation{Input: in, Call: call, Output: out, Return: ret})
		r.mu.Unlock()
	}
}

// Operations is a copy of what was recorded so far.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// MaxKeysNamed bounds the keys without a linearization that a verdict names (and draws).
const MaxKeysNamed = 20

// VisualizationFile is the name of Porcupine's page of the failing keys, beside report.json.
const VisualizationFile = "linearizability.html"

// Check checks ops key by key within timeout in all. On a failure it names the keys whose
// history has no linearization and, with dir set, draws them into dir/VisualizationFile.
func Check(ops []porcupine.Operation, timeout time.Duration, dir string) report.Linearizability {
	t0 := time.Now()
	v := report.Linearizability{Checker: "porcupine", Operations: len(ops), Result: report.LinearizableOK}
	model := Model.ToModel()
	parts := partition(ops)
	v.Partitions = len(parts)
	var bad []porcupine.Operation
	deadline := t0.Add(timeout)
	for _, part := range parts {
		left := time.Until(deadline)
		if left <= 0 {
			v.Result = "unknown"
			break
		}
		switch porcupine.CheckOperationsTimeout(model, part, left) {
		case porcupine.Illegal:
			v.Result = "illegal"
			if len(v.Keys) < MaxKeysNamed {
				v.Keys = append(v.Keys, part[0].Input.(Input).Key)
				bad = append(bad, part...)
			}
		case porcupine.Unknown:
			if v.Result == report.LinearizableOK {
				v.Result = "unknown"
			}
		}
	}
	if len(bad) > 0 && dir != "" {
		_, info := porcupine.CheckOperationsVerbose(model, bad, time.Minute)
		if err := porcupine.VisualizePath(model, info, filepath.Join(dir, VisualizationFile)); err == nil {
			v.Visualization = VisualizationFile
		} else {
			fmt.Fprintln(os.Stderr, "linearizability: visualisation:", err)
		}
	}
	v.CheckSeconds = time.Since(t0).Seconds()
	return v
}

// HTTPClass sorts an HTTP answer (status 0: none reached the client) with its problem type (the
// last segment of a problem+json "type"; "" otherwise) and resource (the payment or other
// resource a final answer names).
func HTTPClass(status int, problem, resource string) Output {
	switch {
	case status >= 200 && status < 300:
		return Output{Class: Final, Answer: fmt.Sprintf("%d %s", status, resource)}
	case status == 402 || (status == 409 && problem == "insufficient-balance"): // a final refusal, replayed as it was
		return Output{Class: Final, Answer: fmt.Sprintf("%d %s", status, problem)}
	case status == 422 && problem == "key-reused":
		return Output{Class: Mismatch}
	case status == 410:
		return Output{Class: Expired}
	case status == 0 || status >= 500 || status == 409 || status == 429:
		return Output{Class: Unknown}
	}
	return Output{Class: Refused}
}

// ProblemType is the last path segment of a problem+json body's "type" ("" when there is none).
func ProblemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil || p.Type == "" {
		return ""
	}
	return p.Type[strings.LastIndexByte(p.Type, '/')+1:]
}

// Intent is the digest an Input carries for an intent body.
func Intent(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:8])
}
