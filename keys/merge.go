package keys

import (
	"slices"
	"time"

	"github.com/idemops/idemops/claim"
)

// A deployment of several tenant cells (docs/SCALING.md) keeps each tenant's keys in one of
// several databases; a search of tenants in more than one asks each and merges. The keyset makes
// that exact: every cell answers its first limit keys after the same cursor, newest first, and
// the first limit of their union are the first limit overall. Key ids are unique across cells
// (each cell's sequences start in a range of their own), so (created_at, id) orders them all and
// the merged page's last key is a cursor every cell reads the same way.

// Page is one database's answer to a search: its rows and the cursor of its next page (nil: it
// has no more).
type Page struct {
	Rows []KeySummary
	Next *Cursor
}

// MergePages merges the pages several databases answered to the same search (same filter, cursor
// and limit) into the page a single database holding all their keys would answer: newest first
// by (created_at, id), at most limit rows, and the cursor of the next page — nil only when no
// database has a key after the last one shown.
func MergePages(pages []Page, limit int) ([]KeySummary, *Cursor) {
	if limit <= 0 || limit > SearchMaxLimit {
		limit = SearchPageSize
	}
	var rows []KeySummary
	more := false
	for _, p := range pages {
		rows = append(rows, p.Rows...)
		more = more || p.Next != nil
	}
	slices.SortFunc(rows, func(a, b KeySummary) int { return newestFirst(a.CreatedAt, a.ID, b.CreatedAt, b.ID) })
	if len(rows) > limit {
		rows, more = rows[:limit], true
	}
	if !more || len(rows) == 0 {
		return rows, nil
	}
	last := rows[len(rows)-1]
	return rows, &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
}

// newestFirst orders (created_at, id) descending, as the search's ORDER BY does.
func newestFirst(at1 time.Time, id1 int64, at2 time.Time, id2 int64) int {
	if c := at2.Compare(at1); c != 0 {
		return c
	}
	switch {
	case id1 > id2:
		return -1
	case id1 < id2:
		return 1
	}
	return 0
}

// MergeFound merges the answers of several databases to one find by key into FindKeys' order
// (tenant, operation, id), at most MaxFound rows.
func MergeFound(found [][]KeySummary) []KeySummary {
	var rows []KeySummary
	for _, f := range found {
		rows = append(rows, f...)
	}
	slices.SortFunc(rows, func(a, b KeySummary) int {
		switch {
		case a.Tenant != b.Tenant:
			return compare(a.Tenant, b.Tenant)
		case a.Operation != b.Operation:
			return compare(a.Operation, b.Operation)
		}
		return compare(a.ID, b.ID)
	})
	if len(rows) > MaxFound {
		rows = rows[:MaxFound]
	}
	return rows
}

func compare[T int64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// MergeStateCounts sums the per-operation, per-state counts of several databases (CountByState's
// answers) into its order (operation, state), at most its bound of rows.
func MergeStateCounts(counts [][]StateCount) []StateCount {
	type opState struct {
		op string
		st string
	}
	sum := map[opState]int64{}
	for _, cs := range counts {
		for _, c := range cs {
			sum[opState{c.Operation, string(c.State)}] += c.N
		}
	}
	out := make([]StateCount, 0, len(sum))
	for k, n := range sum {
		out = append(out, StateCount{Operation: k.op, State: claim.State(k.st), N: n})
	}
	slices.SortFunc(out, func(a, b StateCount) int {
		if a.Operation != b.Operation {
			return compare(a.Operation, b.Operation)
		}
		return compare(string(a.State), string(b.State))
	})
	if len(out) > maxStateCounts {
		out = out[:maxStateCounts]
	}
	return out
}
