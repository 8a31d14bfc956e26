package reconcile

import (
	"archive/zip"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/idemops/idemops/daemon"
	"github.com/idemops/idemops/errs"
)

// Channels deliver bills packed: WeChat Pay's bill download answers gzip-compressed text, and
// Alipay's bill query a URL to a zip holding the 业务明细 detail file and its 业务明细(汇总)
// summary, with GBK-encoded entry names. Unpack takes a statement file as it came and finds the
// statement (and summary) in it, refusing archives that would unpack to more than the limits
// allow before anything is written: too many entries, too many bytes, or a compression ratio
// no bill has (a zip or gzip bomb).

// ArchiveLimits bound what an archive may unpack to. Zero fields take the defaults.
type ArchiveLimits struct {
	// MaxEntries is the most files a zip may hold (default 16; Alipay's has two).
	MaxEntries int
	// MaxBytes is the most the statement files may unpack to together (default DefaultMaxBytes).
	MaxBytes int64
	// MaxRatio is the largest uncompressed/compressed ratio accepted, per zip entry and for a
	// gzip stream (default 200; CSV bills compress 5–30×, bombs 1000× and more). The first MiB
	// of output is not held to it: tiny files compress oddly.
	MaxRatio int64
}

const (
	defaultMaxEntries = 16
	defaultMaxRatio   = 200
	ratioSlack        = 1 << 20
)

func (l ArchiveLimits) withDefaults() ArchiveLimits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = defaultMaxEntries
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxRatio <= 0 {
		l.MaxRatio = defaultMaxRatio
	}
	return l
}

// ErrArchive: an archive that is refused (a bomb, too many entries, no statement in it, no
// way to tell which entry is the statement). Errors of the size limits are ErrTooLarge too.
var ErrArchive = errs.New(errs.Unprocessable, "archive refused")

// sizeRefusal marks an archive refused for its size (err wraps ErrArchive, then ErrTooLarge): its
// kind is too large, like any statement over its limit, not the archive's unprocessable.
func sizeRefusal(err error) error { return sizeError{err} }

type sizeError struct{ error }

func (e sizeError) Unwrap() error        { return e.error }
func (e sizeError) ErrorKind() errs.Kind { return errs.TooLarge }

// Packing says how a statement file came.
type Packing string

const (
	PackingPlain Packing = "plain"
	PackingGzip  Packing = "gzip"
	PackingZip   Packing = "zip"
)

// Unpacked is a statement taken out of the file it came in.
type Unpacked struct {
	Packing Packing
	// Statement reads the statement (decompressed; the limits hold while it is read).
	Statement io.Reader
	// Summary reads the separate summary file (Alipay's 汇总), nil when there is none.
	Summary io.Reader
	// StatementName and SummaryName are the zip entries' names, decoded (GBK where not UTF-8).
	StatementName, SummaryName string
	closers                    []io.Closer
}

// Close releases the readers of the entries.
func (u *Unpacked) Close() error {
	var errs []error
	for _, c := range u.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zipMagic  = []byte("PK\x03\x04")
)

// Unpack looks at the first bytes of a statement file of size bytes: a zip is opened and its
// statement (and summary) entries found, a gzip stream is decompressed, anything else is the
// statement itself. Errors (ErrArchive, with ErrTooLarge for sizes): more entries than
// MaxEntries, declared sizes over MaxBytes or a ratio over MaxRatio, no statement entry, or
// several candidates; a stream that decompresses past the limits fails while it is read.
func Unpack(ra io.ReaderAt, size int64, lim ArchiveLimits) (*Unpacked, error) {
	lim = lim.withDefaults()
	head := make([]byte, 4)
	n, _ := ra.ReadAt(head, 0)
	head = head[:n]
	switch {
	case len(head) >= 4 && string(head) == string(zipMagic):
		return unpackZip(ra, size, lim)
	case len(head) >= 2 && head[0] == gzipMagic[0] && head[1] == gzipMagic[1]:
		src := &countingSource{r: io.NewSectionReader(ra, 0, size)}
		gz, err := gzip.NewReader(bufio.NewReaderSize(src, 32<<10))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrArchive, err)
		}
		gz.Multistream(true)
		r := &bombGuard{r: gz, what: "gzip stream", compressed: func() int64 { return src.n }, lim: lim}
		return &Unpacked{Packing: PackingGzip, Statement: r, closers: []io.Closer{gz}}, nil
	}
	return &Unpacked{Packing: PackingPlain, Statement: io.NewSectionReader(ra, 0, size)}, nil
}

// Limits a zip's end record is held to before its central directory is read (issue 35 item 2):
// the standard library builds every entry the directory lists, so a directory of 1.5 million
// entries cost hundreds of MiB before "at most 16 files" could refuse it.
const (
	// maxZipRecords is the most entries the end record may announce: MaxEntries files, with
	// their directories and resource forks.
	maxZipRecords = 256
	// maxZipDirectory is the most bytes the central directory may take.
	maxZipDirectory = 1 << 20
)

const (
	zipEndSignature      = 0x06054b50
	zip64LocatorSigature = 0x07064b50
	zipEndLen            = 22
)

// zipDirectory reads a zip's end of central directory record — where the directory starts, how
// long it is, how many entries it announces — and refuses, before anything else is read, a zip
// over the limits, a zip64 one (no bill needs it) and one whose numbers do not fit the file. It
// returns a view of the file that ends with the directory the record announces, so a directory
// that goes on past it (a record that lies) is never read.
func zipDirectory(ra io.ReaderAt, size int64) (io.ReaderAt, int64, error) {
	tail := int64(zipEndLen + 65535)
	if tail > size {
		tail = size
	}
	buf := make([]byte, tail)
	if _, err := ra.ReadAt(buf, size-tail); err != nil && err != io.EOF {
		return nil, 0, fmt.Errorf("%w: zip: %v", ErrArchive, err)
	}
	at := -1
	for i := len(buf) - zipEndLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) == zipEndSignature {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, 0, fmt.Errorf("%w: zip: no end of central directory record (a truncated zip?)", ErrArchive)
	}
	end := buf[at : at+zipEndLen]
	disk, dirDisk := binary.LittleEndian.Uint16(end[4:]), binary.LittleEndian.Uint16(end[6:])
	onDisk, records := binary.LittleEndian.Uint16(end[8:]), binary.LittleEndian.Uint16(end[10:])
	dirSize, dirOffset := int64(binary.LittleEndian.Uint32(end[12:])), int64(binary.LittleEndian.Uint32(end[16:]))
	endOffset := size - tail + int64(at)
	switch {
	case records == 0xffff || dirSize == 0xffffffff || dirOffset == 0xffffffff ||
		(at >= 20 && binary.LittleEndian.Uint32(buf[at-20:]) == zip64LocatorSigature):
		return nil, 0, fmt.Errorf("%w: zip64 archives are not accepted", ErrArchive)
	case disk != 0 || dirDisk != 0 || onDisk != records:
		return nil, 0, fmt.Errorf("%w: multi-part zips are not accepted", ErrArchive)
	case records > maxZipRecords:
		return nil, 0, fmt.Errorf("%w: the zip's end record announces %d entries, at most %d are accepted", ErrArchive, records, maxZipRecords)
	case dirSize > maxZipDirectory:
		return nil, 0, fmt.Errorf("%w: the zip's central directory is %d bytes, at most %d are accepted", ErrArchive, dirSize, maxZipDirectory)
	case dirOffset+dirSize > endOffset:
		return nil, 0, fmt.Errorf("%w: zip: the central directory does not fit before its end record", ErrArchive)
	}
	// The view: the file up to the end of the announced directory, then the end record (its
	// comment dropped).
	record := append([]byte(nil), end...)
	binary.LittleEndian.PutUint16(record[20:], 0)
	head := dirOffset + dirSize
	return &joinedReaderAt{a: io.NewSectionReader(ra, 0, head), aLen: head, b: record}, head + zipEndLen, nil
}

// joinedReaderAt reads a then b as one file.
type joinedReaderAt struct {
	a    io.ReaderAt
	aLen int64
	b    []byte
}

func (j *joinedReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	if off < j.aLen {
		k := int64(len(p))
		if off+k > j.aLen {
			k = j.aLen - off
		}
		m, err := j.a.ReadAt(p[:k], off)
		n += m
		if err != nil && err != io.EOF {
			return n, err
		}
		if m < int(k) {
			return n, io.ErrUnexpectedEOF
		}
	}
	if n < len(p) {
		boff := off + int64(n) - j.aLen
		if boff >= int64(len(j.b)) {
			return n, io.EOF
		}
		n += copy(p[n:], j.b[boff:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func unpackZip(ra io.ReaderAt, size int64, lim ArchiveLimits) (*Unpacked, error) {
	view, viewSize, err := zipDirectory(ra, size)
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(view, viewSize)
	if err != nil {
		return nil, fmt.Errorf("%w: zip: %v", ErrArchive, err)
	}
	var files []*zip.File
	for _, f := range zr.File {
		if !f.FileInfo().IsDir() {
			files = append(files, f)
		}
	}
	if len(files) > lim.MaxEntries {
		return nil, fmt.Errorf("%w: zip holds %d files, at most %d are accepted", ErrArchive, len(files), lim.MaxEntries)
	}
	var total uint64
	for _, f := range files {
		total += f.UncompressedSize64
		if total > uint64(lim.MaxBytes) {
			return nil, sizeRefusal(fmt.Errorf("%w: %w: zip unpacks to more than %d bytes", ErrArchive, ErrTooLarge, lim.MaxBytes))
		}
		if f.UncompressedSize64 > ratioSlack && f.UncompressedSize64 > uint64(lim.MaxRatio)*max(f.CompressedSize64, 1) {
			return nil, sizeRefusal(fmt.Errorf("%w: %w: zip entry %q unpacks %d bytes from %d, more than %d× (a zip bomb?)", ErrArchive, ErrTooLarge,
				zipName(f), f.UncompressedSize64, f.CompressedSize64, lim.MaxRatio))
		}
	}
	var statement, summary []*zip.File
	for _, f := range files {
		name := path.Base(zipName(f))
		switch {
		case strings.HasPrefix(name, ".") || strings.HasPrefix(zipName(f), "__MACOSX/"):
			// resource forks and hidden files are not statements
		case strings.Contains(name, "汇总"):
			summary = append(summary, f)
		default:
			statement = append(statement, f)
		}
	}
	if len(statement) != 1 || len(summary) > 1 {
		var names []string
		for _, f := range files {
			names = append(names, zipName(f))
		}
		sort.Strings(names)
		what := "no statement file"
		if len(statement) > 1 || len(summary) > 1 {
			what = "several candidate statement files; cannot tell which to import"
		}
		return nil, fmt.Errorf("%w: zip holds %s (%s)", ErrArchive, what, strings.Join(names, ", "))
	}
	u := &Unpacked{Packing: PackingZip}
	open := func(f *zip.File) (io.Reader, error) {
		rc, err := f.Open()
		if err != nil {
			u.Close()
			return nil, fmt.Errorf("%w: zip entry %q: %v", ErrArchive, zipName(f), err)
		}
		u.closers = append(u.closers, rc)
		compressed := int64(f.CompressedSize64)
		return &bombGuard{r: rc, what: fmt.Sprintf("zip entry %q", zipName(f)), compressed: func() int64 { return compressed }, lim: lim}, nil
	}
	if u.Statement, err = open(statement[0]); err != nil {
		return nil, err
	}
	u.StatementName = zipName(statement[0])
	if len(summary) == 1 {
		if u.Summary, err = open(summary[0]); err != nil {
			return nil, err
		}
		u.SummaryName = zipName(summary[0])
	}
	return u, nil
}

// zipName is an entry's name as text: zips made on Chinese Windows (Alipay's) write GBK names
// without the UTF-8 flag.
func zipName(f *zip.File) string {
	if utf8.ValidString(f.Name) {
		return f.Name
	}
	if s, err := simplifiedchinese.GBK.NewDecoder().String(f.Name); err == nil {
		return s
	}
	return strings.ToValidUTF8(f.Name, "?")
}

// bombGuard stops a decompressing reader once its output passes the byte limit or the ratio
// limit against the compressed bytes behind it.
type bombGuard struct {
	r          io.Reader
	what       string
	compressed func() int64
	lim        ArchiveLimits
	out        int64
}

func (g *bombGuard) Read(p []byte) (int, error) {
	if room := g.lim.MaxBytes - g.out + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := g.r.Read(p)
	g.out += int64(n)
	if err != nil && err != io.EOF && !errors.Is(err, ErrArchive) {
		// A stream that does not decompress (a truncated gzip, a zip entry longer than its
		// header says): the archive is refused, whatever the reader called it.
		err = fmt.Errorf("%w: %s: %v", ErrArchive, g.what, err)
	}
	switch {
	case g.out > g.lim.MaxBytes:
		return n, sizeRefusal(fmt.Errorf("%w: %w: %s unpacks to more than %d bytes", ErrArchive, ErrTooLarge, g.what, g.lim.MaxBytes))
	case g.out > ratioSlack && g.out > g.lim.MaxRatio*max(g.compressed(), 1):
		return n, sizeRefusal(fmt.Errorf("%w: %w: %s unpacks to more than %d× its compressed size (a bomb?)", ErrArchive, ErrTooLarge, g.what, g.lim.MaxRatio))
	}
	return n, err
}

// countingSource counts the compressed bytes a decompressor has read.
type countingSource struct {
	r io.Reader
	n int64
}

func (c *countingSource) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ReconcilePacked unpacks a statement file as it came (plain, gzip or zip; limits from the
// Reconciler's MaxBytes) and reconciles what it holds, the summary file included. A refused
// archive fails the run before anything is imported. The SHA-256 and size of a packed file
// describe the package, not the statement, so they are not used to skip an import unread.
func (r *Reconciler) ReconcilePacked(ctx context.Context, req RunRequest, ra io.ReaderAt, size int64, p daemon.Progress) (*Run, error) {
	u, err := Unpack(ra, size, ArchiveLimits{MaxBytes: r.cfg.MaxBytes})
	if err != nil {
		runID := req.RunID
		if runID == 0 {
			var serr error
			if runID, serr = r.startRun(ctx, req.Job, req.Import.Channel, req.Import.BillDate, req.Import.Importer, req.control); serr != nil {
				return nil, errors.Join(err, serr)
			}
		}
		return r.finishRun(ctx, runID, RunFailed, nil, err)
	}
	defer u.Close()
	if u.Packing != PackingPlain {
		req.Import.SHA256, req.Import.Size = "", 0
	}
	req.Import.Summary = u.Summary
	return r.Reconcile(ctx, req, u.Statement, p)
}
