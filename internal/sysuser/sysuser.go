// Package sysuser lets the private servers the project starts (PostgreSQL, the HA set,
// pgbouncer, RabbitMQ) run as their own system users when this process is root, as those
// servers require: the user's credential, and the folder checks and ownership that go with it.
package sysuser

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Credential is nil unless this process is root; then it is the credential of the system user
// name, or an error saying missing (what to install) when there is no such user.
func Credential(name, missing string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, errors.New(missing)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// TraversableByOthers reports whether every existing folder from dir up to / lets other users
// through (a clone under /root does not).
func TraversableByOthers(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" || d == "." {
			return true
		}
	}
}

// ChownTree gives dir and everything below it to uid:gid.
func ChownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// ReachableDir returns dir as an absolute path, or — when cred (a server's user, nil when this
// process is not root) could not traverse dir's parents, as with a checkout under /root — a
// stable folder under /tmp named prefix plus a digest of that path, the same across runs.
func ReachableDir(dir, prefix string, cred *syscall.Credential) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if cred == nil || TraversableByOthers(filepath.Dir(abs)) {
		return abs, nil
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(os.TempDir(), prefix+hex.EncodeToString(sum[:6])), nil
}
