package sdnotify

import "errors"

// ErrAddress is returned by New for a socket address systemd never sets.
var ErrAddress = errors.New("invalid NOTIFY_SOCKET")
