// Package storekey makes the keys under which the Go middleware stores
// (clients/go/*store, *counter, *limiter) ask the sidecar: the store's
// prefix, then the library's key.
package storekey

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/sluicehq/sluice/proto"
)

// digestMark follows the prefix of a key that stands for a longer one.
const digestMark = "sha256:"

// Make returns prefix+key, or, if that is longer than the sidecar takes
// (proto.MaxKeyLen bytes), prefix+"sha256:" and the hex SHA-256 of key:
// a library's key may be as long as the request it comes from (a URL
// path), and every process maps it to the same bucket. A key that reads
// "sha256:" and a digest shares the bucket of the long key it names.
func Make(prefix, key string) string {
	if len(prefix)+len(key) <= proto.MaxKeyLen {
		return prefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return prefix + digestMark + hex.EncodeToString(sum[:])
}
