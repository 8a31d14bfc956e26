package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Write leaves the run's report in dir: report.json (the Report as is) and, once drawn,
// report.html. The HTML page is the report package's business; the runner only calls Write.
func Write(dir string, r *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644)
}
