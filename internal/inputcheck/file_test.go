package inputcheck

import (
	"os"
	"path/filepath"
	"testing"
)

// ReadFile gives the contents up to the limit, and otherwise the problem without the path.
func TestReadFile_RefusesAMissingOrTooLargeFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cells.yaml")
	if err := os.WriteFile(path, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(path, 5); err != nil || string(data) != "12345" {
		t.Fatalf("a file at the limit: %q, %v", data, err)
	}
	if _, err := ReadFile(path, 4); err == nil || err.Error() != "larger than 4 bytes" {
		t.Fatalf("a file over the limit: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none.yaml"), 5); err == nil || err.Error() != "no such file or directory" {
		t.Fatalf("a missing file: %v", err)
	}
}
