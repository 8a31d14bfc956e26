package inputcheck

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ReadFile reads an operator's file (a cell map, an operations file) and refuses one larger than
// limit bytes. Its error is the problem alone — "no such file or directory", "larger than 1048576
// bytes" —: the caller's error names the file.
func ReadFile(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Unwrap(err) // the *PathError's cause: the caller names the path
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}
