package reconcile

import (
	"archive/zip"
	"bufio"
	"compress/gzip"
	"context"
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

func unpackZip(ra io.ReaderAt, size int64, lim ArchiveLimits) (*Unpacked, error) {
	zr, err := zip.NewReader(ra, size)
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
			if runID, serr = r.StartRun(ctx, req.Job, req.Import.Channel, req.Import.BillDate, req.Import.Importer); serr != nil {
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
