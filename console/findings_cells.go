package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idemops/idemops/reconcile"
)

// Findings across tenant cells. Each cell imports a statement and matches it against its own
// keys (reconcile, cells.go there), so a finding lives in the cell that matched it — and stays
// there when its tenant moves (cells.stayingTables): the findings pages ask every cell, each with
// the operator's visibility as its filter, whatever cells hold the operator's tenants now.
//
// A cell lists its findings newest first by id (the indexes' order); ids are unique across cells
// but each cell has its own range, so id order across cells is not time order. The cells'
// lists are merged by (created_at, id), newest first, each cell's rows kept in its own order,
// and the next page goes on from where each cell stopped: the cursor is the position in every
// cell ("a:123,b:1099511627790"), so paging is exact at any depth. With one cell the cursor is
// the one id, as it always was.

// cellsPos is where a listing across cells (findings, recon runs, purge runs) stands in each
// cell: the id its next rows are below. A cell it does not name starts from its newest row.
type cellsPos map[string]int64

// String is the cursor as the page and the API carry it: cells by name, "a:123,b:456".
func (p cellsPos) String() string {
	names := make([]string, 0, len(p))
	for name := range p {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + ":" + strconv.FormatInt(p[name], 10)
	}
	return strings.Join(parts, ",")
}

// isCellsCursor says whether s is a cursor of cells (not one id).
func isCellsCursor(s string) bool { return strings.Contains(s, ":") }

// parseCellsPos reads a cursor of cells. Errors: a field error on before.
func parseCellsPos(s string) (cellsPos, error) {
	bad := inputErr("before", "is not a page cursor")
	if len(s) > 1024 {
		return nil, bad
	}
	p := cellsPos{}
	for part := range strings.SplitSeq(s, ",") {
		name, id, ok := strings.Cut(part, ":")
		n, err := strconv.ParseInt(id, 10, 64)
		if !ok || name == "" || err != nil || n <= 0 {
			return nil, bad
		}
		if _, twice := p[name]; twice {
			return nil, bad
		}
		p[name] = n
	}
	return p, nil
}

// newerFinding orders findings newest first by (created_at, id): the merge's order.
func newerFinding(a, b *reconcile.Finding) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return a.ID > b.ID
}

// findingID is a finding's id: a cell's position in a listing of findings.
func findingID(f *reconcile.Finding) int64 { return f.ID }

// mergeNewest merges the cells' pages (each newest first, as the cell lists them — by id —, up to
// asked rows read after pos) into the first limit rows by newer, each cell's rows in their own
// order, and the position after them (nil: no cell has a row left); id is a row's id, which a
// cell's position is. A cell asked for more than limit rows that has one left shows there is a
// next page; a cell asked for no more than limit (its store lists no more at once) whose page
// came back full and was taken whole may have more, so it names a next page too (asked 0: not
// a page of a listing).
func mergeNewest[T any](names []string, pages [][]T, pos cellsPos, limit, asked int, newer func(a, b *T) bool, id func(*T) int64) ([]T, cellsPos) {
	at := make([]int, len(pages)) // the next row of each page
	var out []T
	for len(out) < limit {
		best := -1
		for i, p := range pages {
			if at[i] < len(p) && (best < 0 || newer(&p[at[i]], &pages[best][at[best]])) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, pages[best][at[best]])
		at[best]++
	}
	more := false
	next := cellsPos{}
	for name, id := range pos {
		next[name] = id
	}
	for i, p := range pages {
		more = more || at[i] < len(p) || asked > 0 && asked <= limit && len(p) == asked
		if at[i] > 0 {
			next[names[i]] = id(&p[at[i]-1])
		}
	}
	if !more {
		return out, nil
	}
	return out, next
}

// eachFindingIn streams the findings f matches in every cell, merged newest first by
// (created_at, id) like the list, at most max of them: fn is called for each in order and its
// first error stops every cell's read. With one cell: the cell's own stream.
func (s *Server) eachFindingIn(ctx context.Context, f reconcile.FindingFilter, max int, fn func(*reconcile.Finding) error) error {
	in := s.cells.everywhere()
	if len(in) == 1 {
		return in[0].recon.EachFinding(ctx, f, max, fn)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]chan reconcile.Finding, len(in))
	fails := make([]error, len(in))
	var wg sync.WaitGroup
	for i, c := range in {
		streams[i] = make(chan reconcile.Finding, 64)
		wg.Go(func() {
			defer close(streams[i])
			fails[i] = c.recon.EachFinding(ctx, f, max, func(fd *reconcile.Finding) error {
				select {
				case streams[i] <- *fd:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})
	}
	heads := make([]*reconcile.Finding, len(in))
	pull := func(i int) {
		if fd, ok := <-streams[i]; ok {
			heads[i] = &fd
		} else {
			heads[i] = nil
		}
	}
	for i := range in {
		pull(i)
	}
	var err error
	for n := 0; n < max; n++ {
		best := -1
		for i, h := range heads {
			if h != nil && (best < 0 || newerFinding(h, heads[best])) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		if err = fn(heads[best]); err != nil {
			break
		}
		pull(best)
	}
	cancel()
	for i := range streams {
		for range streams[i] { // let every reader finish
		}
	}
	wg.Wait()
	if err != nil {
		return err
	}
	if err := parent.Err(); err != nil {
		return err
	}
	for i, e := range fails {
		if e != nil && !errors.Is(e, context.Canceled) {
			return fmt.Errorf("cell %s: %w", in[i].name, e)
		}
	}
	return nil
}

// parseCursor reads a page's cursor: a position in every cell, or one id (0: none). Errors: a
// field error on before.
func parseCursor(before string) (cellsPos, int64, error) {
	if isCellsCursor(before) {
		pos, err := parseCellsPos(before)
		return pos, 0, err
	}
	id, err := parseBefore(before)
	return nil, id, err
}

// pageAcrossCells reads one page of a list every cell keeps newest first by id: from before (""
// for the newest, one id, or a position in every cell), shown rows, and the cursor of the next
// page ("" none). list reads up to limit rows of cell c below id beforeID (0: from the newest),
// its store most at once. With one database: list as it is, read rows (at most most), the next
// page named when the read came back full — a page reads one more than it shows, an API as many.
// Across cells: every cell's next shown+1 (most, when shown is most) merged by newer
// (mergeNewest): a page shows as many rows across cells as with one database.
func pageAcrossCells[T any](ctx context.Context, cs *cellSet, before string, read, shown, most int,
	list func(ctx context.Context, c scopedCell, beforeID int64, limit int) ([]T, error),
	newer func(a, b *T) bool, id func(*T) int64) ([]T, string, error) {
	pos, beforeID, err := parseCursor(before)
	if err != nil {
		return nil, "", err
	}
	in := cs.everywhere()
	if cs.cells == nil {
		read = min(read, most)
		rows, err := list(ctx, in[0], beforeID, read)
		if err != nil || len(rows) == 0 || len(rows) < read {
			return rows, "", err
		}
		rows = rows[:min(len(rows), shown)]
		return rows, strconv.FormatInt(id(&rows[len(rows)-1]), 10), nil
	}
	asked := min(shown+1, most)
	pages, err := eachCell(ctx, in, func(ctx context.Context, c scopedCell) ([]T, error) {
		from := beforeID
		if p, ok := pos[c.name]; ok {
			from = p
		}
		return list(ctx, c, from, asked)
	})
	if err != nil {
		return nil, "", err
	}
	names := make([]string, len(in))
	for i, c := range in {
		names[i] = c.name
	}
	rows, after := mergeNewest(names, pages, pos, shown, asked, newer, id)
	if after == nil {
		return rows, "", nil
	}
	return rows, after.String(), nil
}
