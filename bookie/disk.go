package bookie

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// diskUsage returns the used fraction of the file system holding dir, as df computes it.
func diskUsage(dir string) (float64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	total := float64(st.Blocks) * float64(st.Bsize)
	if total == 0 {
		return 0, nil
	}
	avail := float64(st.Bavail) * float64(st.Bsize)
	free := float64(st.Bfree) * float64(st.Bsize)
	used := total - free
	// df: used / (used + available to unprivileged users)
	return used / (used + avail), nil
}
