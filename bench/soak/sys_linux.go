//go:build linux

package soak

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// This file holds every syscall of the package.

// statDir returns the magic number of dir's file system and the bytes free
// on it for an unprivileged user.
func statDir(dir string) (magic uint32, avail uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("soak: statfs %s: %w", dir, err)
	}
	return uint32(st.Type), st.Bavail * uint64(st.Bsize), nil
}

// kernelRelease returns the running kernel's release, as uname -r.
func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("soak: uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}
