package global

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors. Functions wrap them with %w and add what went wrong, so
// callers match with errors.Is and show err.Error() to people.
var (
	// ErrUnsupported: a limit a global bucket cannot hold exactly (a count
	// or a derived duration past what Redis's Lua numbers keep exact, or an
	// algorithm or flag with no global form).
	ErrUnsupported = errors.New("the limit cannot be global")

	// ErrUnavailable: Redis could not decide in time: unreachable, timed
	// out, or a cluster without a master for the key's slot. The request
	// was not decided; it may or may not have consumed tokens in Redis
	// (a reply lost in flight), so retrying it can only under-admit.
	ErrUnavailable = errors.New("Redis is unavailable")

	// ErrScript: Redis answered with an error or a reply the script never
	// sends (a bucket written by something else, a Redis without Lua).
	ErrScript = errors.New("the Redis script failed")

	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("the global store is closed")
)

// classify wraps err in ErrUnavailable (Redis did not decide: network,
// timeout, a cluster or replica not ready) or ErrScript (Redis decided
// nothing because the script or its data failed).
func classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrScript) {
		return err
	}
	var ne net.Error
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	switch {
	case errors.As(err, &cve), errors.As(err, &rhe):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for _, p := range []string{"CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN", "MOVED", "ASK",
		"NOAUTH", "WRONGPASS", "NOPERM"} {
		if redis.HasErrorPrefix(err, p) {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	if msg := err.Error(); strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such file") ||
		isNonLocal(err) || strings.Contains(msg, "cluster is down") {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %v", ErrScript, err)
}
