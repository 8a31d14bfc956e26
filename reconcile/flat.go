package reconcile

import (
	"context"
	"errors"
	"io"
	"strings"
)

// rowReader turns one detail row into a statement line, or names the kind of a row that is not
// an order line (a fee, a payout) in skip.
type rowReader func(rec record) (line StatementLine, skip string, err error)

// parseFlat reads the statements that are one header row and detail rows with no control totals
// (Stripe, Adyen, CSV profiles). headerLine, when positive, is the physical line of the header;
// otherwise the first record is. Comment records are ignored.
func parseFlat(ctx context.Context, r io.Reader, fn func(StatementLine) error, format string, o options,
	cfg readerConfig, headerLine int, bind func(*header) (rowReader, error)) (*Summary, error) {
	rr, err := newRecordReader(r, o, cfg)
	if err != nil {
		return nil, err
	}
	sink := newSink(ctx, fn, format)
	sum := sink.sum
	defer func() { sum.Bytes = rr.bytesRead() }()

	var rec record
	for {
		rec, err = rr.next()
		if errors.Is(err, io.EOF) {
			return sum, lineErrorf(rr.line+1, "no header row")
		}
		if err != nil {
			return sum, err
		}
		if headerLine > 0 && rec.line > headerLine {
			return sum, lineErrorf(rec.line, "the header should be on line %d, which is blank or a comment", headerLine)
		}
		if rec.comment || rec.line < headerLine {
			continue
		}
		break
	}
	h := newHeader(rec)
	sum.Header = h.names
	read, err := bind(h)
	if err != nil {
		return sum, err
	}
	for {
		rec, err = rr.next()
		if errors.Is(err, io.EOF) {
			return sum, nil
		}
		if err != nil {
			return sum, err
		}
		if rec.comment {
			continue
		}
		if err := sink.row(); err != nil {
			return sum, err
		}
		if err := h.checkWidth(rec); err != nil {
			return sum, err
		}
		line, skip, err := read(rec)
		if err != nil {
			return sum, err
		}
		if skip != "" {
			sum.skip(skip)
			continue
		}
		line.LineNo = rec.line
		line.Raw = rec.text
		if err := sink.emit(line); err != nil {
			return sum, err
		}
	}
}

// columnSet resolves named columns of a header, failing on the first required one missing.
type columnSet struct {
	h   *header
	err error
}

// need returns the column of the first present name; a missing column is remembered as the
// error.
func (c *columnSet) need(names ...string) int {
	i, err := c.h.need(names...)
	if err != nil && c.err == nil {
		c.err = err
	}
	return i
}

// cell returns a trimmed cell, or "" for an absent column.
func cell(fields []string, i int) string {
	if i < 0 {
		return ""
	}
	return trimCell(fields[i])
}

func trimCell(s string) string { return strings.TrimSpace(s) }
