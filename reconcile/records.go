package reconcile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemops/idemops/errs"
)

// textEncoding is the character encoding of a statement file.
type textEncoding string

const (
	encodingUTF8 textEncoding = "utf-8"
	encodingGBK  textEncoding = "gbk"
)

// readerConfig is how one format lays out its text.
type readerConfig struct {
	encoding textEncoding
	comma    byte   // field separator
	comment  string // lines starting with it come back as comment records; "" for none
}

// record is one logical CSV row: usually one physical line, more when a quoted field spans lines.
type record struct {
	line    int    // physical line the record starts on, 1-based
	text    string // decoded text, line terminators removed (inner ones kept as \n)
	comment bool
	fields  []string // valid until the next call to next
}

// recordReader streams records from a statement. It holds one line at a time: memory does not
// grow with the file. It handles a gzip wrapper, the size limits, the UTF-8 BOM, CRLF, blank
// lines, quoted fields (with "" escapes and embedded newlines) and GBK decoding, and it checks
// every line is valid in its encoding.
//
// It splits fields itself (split) rather than through encoding/csv, whose Reader does not give
// what bills need: a bound on one record (csv.Reader buffers a field whose quote never closes
// until the end of the file; here a record is cut at maxLine with a LineError naming the line),
// an error per physical line for bytes invalid in the encoding, comment lines with a prefix of
// more than one character that come back as records with their raw text (Alipay's "#" summary
// lines carry the control totals; csv.Reader drops comments), a bare quote inside an unquoted
// field kept as-is without LazyQuotes loosening quoted fields too, rows of empty cells skipped
// like blank lines, and the raw text of each row for preamble lines before the header row.
type recordReader struct {
	br      *bufio.Reader
	counter *limitReader
	gbk     *encoding.Decoder
	cfg     readerConfig
	maxLine int
	line    int // physical lines read so far
	fields  []string
}

func newRecordReader(r io.Reader, o options, cfg readerConfig) (*recordReader, error) {
	// Peek for the gzip magic: WeChat serves its bills optionally gzipped.
	src := bufio.NewReader(r)
	if magic, _ := src.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		in := &countingSource{r: src}
		gz, err := gzip.NewReader(in)
		if err != nil {
			return nil, fmt.Errorf("%w: bad gzip header: %v", ErrMalformed, err)
		}
		// The size limit is the limitReader's below; the ratio is a gzip bomb's tell.
		r = &bombGuard{r: gz, what: "gzip stream", compressed: func() int64 { return in.n },
			lim: ArchiveLimits{MaxBytes: math.MaxInt64 - 1}.withDefaults()}
	} else {
		r = src
	}
	lim := &limitReader{r: r, max: o.maxBytes}
	rr := &recordReader{
		br:      bufio.NewReaderSize(lim, o.maxLine),
		counter: lim,
		cfg:     cfg,
		maxLine: o.maxLine,
	}
	if cfg.encoding == encodingGBK {
		rr.gbk = simplifiedchinese.GBK.NewDecoder()
	}
	return rr, nil
}

// bytesRead is how much of the (decompressed) statement has been consumed.
func (r *recordReader) bytesRead() int64 { return r.counter.n }

// next returns the next record that is not blank, or io.EOF after the last one.
func (r *recordReader) next() (record, error) {
	for {
		text, err := r.readLine()
		if err != nil {
			return record{}, err
		}
		start := r.line
		if strings.TrimSpace(text) == "" {
			continue
		}
		if r.cfg.comment != "" && strings.HasPrefix(text, r.cfg.comment) {
			return record{line: start, text: text, comment: true}, nil
		}
		for {
			fields, complete, err := r.split(text, start)
			if err != nil {
				return record{}, err
			}
			if complete {
				if allBlank(fields) {
					break // a row of empty cells (",,,,") is a blank line too
				}
				return record{line: start, text: text, fields: fields}, nil
			}
			more, err := r.readLine()
			if errors.Is(err, io.EOF) {
				return record{}, lineErrorf(start, "quoted field is not closed before the end of the file")
			}
			if err != nil {
				return record{}, err
			}
			if len(text)+1+len(more) > r.maxLine {
				return record{}, &LineError{Line: start, Reason: fmt.Sprintf("record longer than %d bytes", r.maxLine), Err: ErrTooLarge,
					Why: errs.Phrasef("record longer than %d bytes", r.maxLine)}
			}
			text = text + "\n" + more
		}
	}
}

func allBlank(fields []string) bool {
	for _, f := range fields {
		if strings.TrimSpace(f) != "" {
			return false
		}
	}
	return true
}

// readLine reads one physical line, decoded, without its terminator.
func (r *recordReader) readLine() (string, error) {
	b, err := r.br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return "", &LineError{Line: r.line + 1, Reason: fmt.Sprintf("line longer than %d bytes", r.maxLine), Err: ErrTooLarge,
			Why: errs.Phrasef("line longer than %d bytes", r.maxLine)}
	case errors.Is(err, io.EOF):
		if len(b) == 0 {
			return "", io.EOF
		}
	case err != nil:
		return "", fmt.Errorf("line %d: %w", r.line+1, err)
	}
	r.line++
	b = bytes.TrimSuffix(b, []byte{'\n'})
	b = bytes.TrimSuffix(b, []byte{'\r'})
	if r.gbk != nil {
		out, err := r.gbk.Bytes(b)
		if err != nil || bytes.ContainsRune(out, utf8.RuneError) {
			return "", lineErrorf(r.line, "bytes that are not valid GBK")
		}
		return string(out), nil
	}
	if r.line == 1 {
		b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	}
	if !utf8.Valid(b) {
		return "", lineErrorf(r.line, "bytes that are not valid UTF-8")
	}
	return string(b), nil
}

// split cuts one record's text into fields. complete is false when a quoted field runs past the
// end of text (it continues on the next physical line). Quotes inside an unquoted field are kept
// as they are; text between a closing quote and the next separator is an error.
func (r *recordReader) split(s string, line int) (fields []string, complete bool, err error) {
	f := r.fields[:0]
	comma := r.cfg.comma
	i := 0
	for {
		if i < len(s) && s[i] == '"' {
			j := i + 1
			escaped := false
			for {
				k := strings.IndexByte(s[j:], '"')
				if k < 0 {
					return nil, false, nil
				}
				j += k
				if j+1 < len(s) && s[j+1] == '"' {
					escaped = true
					j += 2
					continue
				}
				break
			}
			v := s[i+1 : j]
			if escaped {
				v = strings.ReplaceAll(v, `""`, `"`)
			}
			f = append(f, v)
			j++
			if j == len(s) {
				r.fields = f
				return f, true, nil
			}
			if s[j] != comma {
				return nil, false, lineErrorf(line, "field %d: text after the closing quote", len(f))
			}
			i = j + 1
			continue
		}
		k := strings.IndexByte(s[i:], comma)
		if k < 0 {
			f = append(f, s[i:])
			r.fields = f
			return f, true, nil
		}
		f = append(f, s[i:i+k])
		i += k + 1
	}
}

// limitReader fails with ErrTooLarge once more than max bytes have been read.
type limitReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n > l.max {
		return 0, l.err()
	}
	if room := l.max - l.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	k, err := l.r.Read(p)
	l.n += int64(k)
	if l.n > l.max {
		return k, l.err()
	}
	return k, err
}

func (l *limitReader) err() error {
	return errs.Errorf("%w: more than %d bytes", ErrTooLarge, l.max)
}

// header maps column names to positions. Lookups ignore case, surrounding space, a backtick
// prefix and the width of parentheses, so `订单金额（元）` and `订单金额(元)` are one column.
type header struct {
	line  int
	names []string // as written in the file
	index map[string]int
}

var parenWidth = strings.NewReplacer("（", "(", "）", ")")

func headerKey(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "`")
	return strings.ToLower(parenWidth.Replace(strings.TrimSpace(s)))
}

func newHeader(rec record) *header {
	h := &header{line: rec.line, names: make([]string, len(rec.fields)), index: map[string]int{}}
	for i, f := range rec.fields {
		h.names[i] = strings.TrimSpace(f)
		k := headerKey(f)
		if _, dup := h.index[k]; !dup && k != "" {
			h.index[k] = i
		}
	}
	return h
}

// col returns the position of the first of names present in the header, or -1.
func (h *header) col(names ...string) int {
	for _, n := range names {
		if i, ok := h.index[headerKey(n)]; ok {
			return i
		}
	}
	return -1
}

// need is col for a column the format cannot do without.
func (h *header) need(names ...string) (int, error) {
	if i := h.col(names...); i >= 0 {
		return i, nil
	}
	return -1, lineErrorf(h.line, "missing column %s", strings.Join(names, " or "))
}

// checkWidth insists a row has as many fields as the header: a short or long row means a
// shifted column, and reading it by name would silently take the wrong cell.
func (h *header) checkWidth(rec record) error {
	if len(rec.fields) != len(h.names) {
		return lineErrorf(rec.line, "%d fields, but the header on line %d has %d", len(rec.fields), h.line, len(h.names))
	}
	return nil
}
