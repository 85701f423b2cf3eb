//go:build !unix

package global

import (
	"errors"
	"os"
)

func mapFile(*os.File, int) ([]byte, error) {
	return nil, errors.New("a lease journal needs a Unix system")
}

func unmapFile([]byte) error { return nil }
