package console

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// axe-core, fetched from the npm registry at test time with `npm pack` (never committed) and
// cached outside the repository. The tarball is checked against the registry's published
// integrity for this version, so a cached or fetched file that differs is refused.
const (
	axeVersion   = "4.14.1"
	axeIntegrity = "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
)

// axeCacheDir is $IDEMOPS_CACHE_DIR, else the user cache directory (~/.cache/idemops), else
// the temporary directory.
func axeCacheDir() (string, error) {
	if d := os.Getenv("IDEMOPS_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir() // no $HOME: still outside the repository
	}
	return filepath.Join(d, "idemops"), nil
}

// axeSource returns axe.min.js. When it cannot be had, the test skips with one line, or under
// CI=true fails (.ci/run installs npm).
func axeSource(t *testing.T) string {
	t.Helper()
	src, err := loadAxe()
	if err != nil {
		t.Fatalf("axe-core %s: %v (`make prereqs` installs npm)", axeVersion, err)
	}
	return src
}

func loadAxe() (string, error) {
	dir, err := axeCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: %w", err)
	}
	tgz := filepath.Join(dir, "axe-core-"+axeVersion+".tgz")
	if _, err := os.Stat(tgz); err != nil {
		if err := fetchAxe(dir); err != nil {
			return "", err
		}
	}
	data, err := os.ReadFile(tgz)
	if err != nil {
		return "", err
	}
	sum := sha512.Sum512(data)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != axeIntegrity {
		_ = os.Remove(tgz) // fetched again next time
		return "", fmt.Errorf("%s: integrity %s, want %s", tgz, got, axeIntegrity)
	}
	return axeFromTarball(data)
}

// fetchAxe runs `npm pack axe-core@version` into dir (bounded by a minute).
func fetchAxe(dir string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errors.New("npm is not installed (apt-get install npm), so it cannot be fetched")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Into a fresh directory, then renamed: a concurrent or interrupted fetch leaves no half file.
	tmp, err := os.MkdirTemp(dir, "fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "pack", "axe-core@"+axeVersion, "--pack-destination", tmp, "--silent")
	cmd.Dir = tmp
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return fmt.Errorf("npm pack axe-core@%s: %v: %s", axeVersion, err, msg)
	}
	name := "axe-core-" + axeVersion + ".tgz"
	return os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name))
}

// axeFromTarball reads package/axe.min.js out of the npm tarball.
func axeFromTarball(data []byte) (string, error) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", errors.New("package/axe.min.js not in the tarball")
		}
		if err != nil {
			return "", err
		}
		if h.Name == "package/axe.min.js" {
			b, err := io.ReadAll(io.LimitReader(tr, 16<<20))
			return string(b), err
		}
	}
}
