package storekey

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/proto"
)

// A key that fits is the prefix and the key; a longer one the prefix and
// its digest, which tells it from another long key.
func TestMake(t *testing.T) {
	fits := strings.Repeat("k", proto.MaxKeyLen-len("p:"))
	long := fits + "x"
	sum := sha256.Sum256([]byte(long))
	for _, tc := range []struct{ key, want string }{
		{"alice", "p:alice"},
		{fits, "p:" + fits},
		{long, "p:sha256:" + hex.EncodeToString(sum[:])},
	} {
		if got := Make("p:", tc.key); got != tc.want {
			t.Errorf("Make(%d bytes) = %q, want %q", len(tc.key), got, tc.want)
		}
	}
	if Make("p:", long) == Make("p:", long+"y") {
		t.Error("two long keys share a bucket")
	}
}
