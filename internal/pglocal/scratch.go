package pglocal

import (
	"os"
	"syscall"
)

// memoryFS is where ScratchDir puts a throwaway cluster when the machine has room there.
const memoryFS = "/dev/shm"

// scratchRoom is the free space a memory filesystem must have to hold a throwaway cluster: a
// test run's databases and the WAL between two checkpoints stay far below it, and two benchmark
// worlds of a million keys fit beside them.
const scratchRoom = 8 << 30

// tmpfsMagic is statfs's f_type of tmpfs (linux/magic.h).
const tmpfsMagic = 0x01021994

// ScratchDir makes a fresh folder, named prefix plus a random suffix, for the data of a cluster
// that lives only as long as its owner (a test binary, withpg): on the memory filesystem
// /dev/shm when it is a tmpfs with room, else under os.TempDir. A test run creates and drops
// hundreds of databases of ~1,500 files each, and on ext4 allocating their inodes (its scan
// past recently deleted ones) cost ~0.3 s of kernel CPU per database — two thirds of the run's
// CPU — against ~0.05 s on tmpfs. The cluster runs with fsync off already, so a memory
// filesystem loses nothing a throwaway cluster keeps. The folder lets other users through
// (0711): the server may run as the postgres system user.
func ScratchDir(prefix string) (string, error) {
	base := os.TempDir()
	var fs syscall.Statfs_t
	if syscall.Statfs(memoryFS, &fs) == nil && fs.Type == tmpfsMagic && fs.Bavail*uint64(fs.Bsize) >= scratchRoom {
		base = memoryFS
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}
