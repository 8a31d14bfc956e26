package console

import "io"

// sizedReaderAt gives an upload (a multipart.File: in memory or a temporary file) as a ReaderAt
// with its size, which unpacking a zip needs.
func sizedReaderAt(r io.Reader) (io.ReaderAt, int64, bool) {
	type readSeekerAt interface {
		io.ReaderAt
		io.Seeker
	}
	f, ok := r.(readSeekerAt)
	if !ok {
		return nil, 0, false
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, 0, false
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, false
	}
	return f, size, true
}
