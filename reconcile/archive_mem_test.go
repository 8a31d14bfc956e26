package reconcile

import (
	"archive/zip"
	"bufio"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Issue 35 item 2: an archive is refused before it costs memory. Every archive path — a gzip
// bomb, a zip bomb, a zip whose central directory lists 300 000 entries — costs at most
// archiveHeapBudget of heap above its body, counted as every byte allocated while it is
// unpacked and read to the end (runtime.MemStats.TotalAlloc: an upper bound of the peak).
const archiveHeapBudget = 64 << 20

// allocated runs f and returns how many heap bytes it allocated.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// unpackAll unpacks the file at path and reads its statement to the end, as an import does.
func unpackAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, _ := f.Stat()
	u, err := Unpack(f, st.Size(), ArchiveLimits{})
	if err != nil {
		return err
	}
	defer u.Close()
	_, err = io.Copy(io.Discard, u.Statement)
	return err
}

// zeros writes n zero bytes to w.
func zeros(w io.Writer, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// gzipBomb is 256 MiB of zeros, gzip-compressed (about 4 MiB).
func gzipBomb(t *testing.T, dir string) string {
	path := filepath.Join(dir, "bomb.gz")
	f, _ := os.Create(path)
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err := zeros(zw, 256<<20); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	f.Close()
	return path
}

// zipBomb is one entry of 256 MiB of zeros, its sizes declared honestly.
func zipBomb(t *testing.T, dir string) string {
	path := filepath.Join(dir, "bomb.zip")
	f, _ := os.Create(path)
	zw := zip.NewWriter(f)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "bill.csv", Method: zip.Deflate})
	if err := zeros(w, 256<<20); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	f.Close()
	return path
}

// lyingZipBomb is one entry of 256 MiB of zeros whose headers declare 10 bytes: only reading it
// finds out.
func lyingZipBomb(t *testing.T, dir string) string {
	path := filepath.Join(dir, "lying.zip")
	f, _ := os.Create(path)
	bw := bufio.NewWriter(f)
	name := []byte("bill.csv")
	local := make([]byte, 30)
	binary.LittleEndian.PutUint32(local[0:], 0x04034b50)
	binary.LittleEndian.PutUint16(local[4:], 20)
	binary.LittleEndian.PutUint16(local[6:], 0x08) // sizes in a data descriptor
	binary.LittleEndian.PutUint16(local[8:], zip.Deflate)
	binary.LittleEndian.PutUint16(local[26:], uint16(len(name)))
	bw.Write(local)
	bw.Write(name)
	cw := &countWriter{w: bw}
	fw, _ := flate.NewWriter(cw, flate.BestCompression)
	if err := zeros(fw, 256<<20); err != nil {
		t.Fatal(err)
	}
	fw.Close()
	desc := make([]byte, 16)
	binary.LittleEndian.PutUint32(desc[0:], 0x08074b50)
	binary.LittleEndian.PutUint32(desc[8:], uint32(cw.n))
	binary.LittleEndian.PutUint32(desc[12:], 10)
	bw.Write(desc)
	dirStart := 30 + int64(len(name)) + cw.n + 16
	central := make([]byte, 46)
	binary.LittleEndian.PutUint32(central[0:], 0x02014b50)
	binary.LittleEndian.PutUint16(central[4:], 20)
	binary.LittleEndian.PutUint16(central[6:], 20)
	binary.LittleEndian.PutUint16(central[8:], 0x08)
	binary.LittleEndian.PutUint16(central[10:], zip.Deflate)
	binary.LittleEndian.PutUint32(central[20:], uint32(cw.n))
	binary.LittleEndian.PutUint32(central[24:], 10)
	binary.LittleEndian.PutUint16(central[28:], uint16(len(name)))
	bw.Write(central)
	bw.Write(name)
	end := make([]byte, 22)
	binary.LittleEndian.PutUint32(end[0:], 0x06054b50)
	binary.LittleEndian.PutUint16(end[8:], 1)
	binary.LittleEndian.PutUint16(end[10:], 1)
	binary.LittleEndian.PutUint32(end[12:], uint32(46+len(name)))
	binary.LittleEndian.PutUint32(end[16:], uint32(dirStart))
	bw.Write(end)
	bw.Flush()
	f.Close()
	return path
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// directoryBomb is a zip whose central directory lists n empty stored entries (the end record
// says so too: entries counts wrap at 65535, as a writer that does not use zip64 leaves them).
func directoryBomb(t *testing.T, dir string, n int, honestCount bool) string {
	path := filepath.Join(dir, "entries.zip")
	f, _ := os.Create(path)
	bw := bufio.NewWriterSize(f, 1<<20)
	crc := crc32.ChecksumIEEE(nil)
	var offset int64
	names := func(i int) []byte { return []byte("dir/entry-" + itoa6(i) + ".csv") }
	for i := 0; i < n; i++ {
		name := names(i)
		local := make([]byte, 30)
		binary.LittleEndian.PutUint32(local[0:], 0x04034b50)
		binary.LittleEndian.PutUint16(local[4:], 10)
		binary.LittleEndian.PutUint32(local[14:], crc)
		binary.LittleEndian.PutUint16(local[26:], uint16(len(name)))
		bw.Write(local)
		bw.Write(name)
	}
	offset = 0
	dirStart := int64(0)
	for i := 0; i < n; i++ {
		dirStart += 30 + int64(len(names(i)))
	}
	var dirSize int64
	for i := 0; i < n; i++ {
		name := names(i)
		central := make([]byte, 46)
		binary.LittleEndian.PutUint32(central[0:], 0x02014b50)
		binary.LittleEndian.PutUint16(central[4:], 10)
		binary.LittleEndian.PutUint16(central[6:], 10)
		binary.LittleEndian.PutUint32(central[16:], crc)
		binary.LittleEndian.PutUint16(central[28:], uint16(len(name)))
		binary.LittleEndian.PutUint32(central[42:], uint32(offset))
		bw.Write(central)
		bw.Write(name)
		offset += 30 + int64(len(name))
		dirSize += 46 + int64(len(name))
	}
	count := n
	if !honestCount {
		count = 1 // the end record lies: one entry
	}
	end := make([]byte, 22)
	binary.LittleEndian.PutUint32(end[0:], 0x06054b50)
	binary.LittleEndian.PutUint16(end[8:], uint16(count))
	binary.LittleEndian.PutUint16(end[10:], uint16(count))
	binary.LittleEndian.PutUint32(end[12:], uint32(dirSize))
	binary.LittleEndian.PutUint32(end[16:], uint32(dirStart))
	bw.Write(end)
	bw.Flush()
	f.Close()
	return path
}

func itoa6(i int) string {
	b := []byte("000000")
	for j := 5; j >= 0 && i > 0; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return string(b)
}

func TestArchives_RefusedBeforeTheyCostMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds multi-GiB bombs")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		make func() string
	}{
		{"gzip bomb, 256 MiB of zeros", func() string { return gzipBomb(t, dir) }},
		{"zip bomb, 256 MiB entry declared", func() string { return zipBomb(t, dir) }},
		{"zip bomb, 256 MiB entry declared as 10 bytes", func() string { return lyingZipBomb(t, dir) }},
		{"a central directory of 300 000 entries", func() string { return directoryBomb(t, dir, 300_000, true) }},
		{"300 000 entries, the end record claiming 1", func() string { return directoryBomb(t, dir, 300_000, false) }},
	} {
		path := c.make()
		st, _ := os.Stat(path)
		var err error
		n := allocated(func() { err = unpackAll(path) })
		t.Logf("%s: %d MiB file, refused with %q, %.1f MiB allocated", c.name, st.Size()>>20, err, float64(n)/(1<<20))
		if !errors.Is(err, ErrArchive) {
			t.Errorf("%s: %v; want ErrArchive", c.name, err)
		}
		if n > archiveHeapBudget {
			t.Errorf("%s: %d MiB allocated, the budget is %d MiB", c.name, n>>20, archiveHeapBudget>>20)
		}
		os.Remove(path)
	}
}
