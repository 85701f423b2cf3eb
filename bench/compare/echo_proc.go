package compare

import (
	"context"
	"path/filepath"
)

// EchoProcess returns a Config.EchoServer that runs the echo in its own
// process, argv plus "-socket PATH" (the sidecar and Redis run in theirs,
// so the floor pays the same scheduling as they do).
func EchoProcess(dir string, argv ...string) func(ctx context.Context) (string, func() error, error) {
	return func(ctx context.Context) (string, func() error, error) {
		path := filepath.Join(dir, "echo.sock")
		args := append(append([]string(nil), argv...), "-socket", path)
		p, err := startProcess(ctx, "echo server", args, dialable("unix", path))
		if err != nil {
			return "", nil, err
		}
		return path, p.stop, nil
	}
}
