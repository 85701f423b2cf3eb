package metrics

import "errors"

// ErrAddress is wrapped by Listen's errors about the address itself.
var ErrAddress = errors.New("invalid metrics address")
