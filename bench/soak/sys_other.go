//go:build !linux

package soak

func statDir(dir string) (magic uint32, avail uint64, err error) { return 0, 0, ErrUnsupported }

func kernelRelease() (string, error) { return "", ErrUnsupported }
