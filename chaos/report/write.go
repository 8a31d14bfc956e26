package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Write leaves the run's report in dir: report.json (the Report as is) and report.html (the
// page drawn from it). Each file is written whole or not at all (a temporary file renamed).
func Write(dir string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := writeFile(filepath.Join(dir, "report.json"), append(b, '\n')); err != nil {
		return err
	}
	return WriteHTML(dir, r)
}

// WriteHTML draws r into dir/report.html (report.json is left alone): how a report is redrawn
// from its JSON.
func WriteHTML(dir string, r *Report) error {
	var buf bytes.Buffer
	if err := Draw(&buf, r); err != nil {
		return fmt.Errorf("report: draw: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return writeFile(filepath.Join(dir, "report.html"), buf.Bytes())
}

// writeFile replaces path with b whole: a reader never sees half a report.
func writeFile(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone already after the rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
