// Package locktest helps the tests of lock waits: a process that decides
// in a state file beside its sidecar, as a direct client does, holds a
// bucket's lock and is stopped (SIGSTOP) holding it; and the CPU time a
// process uses while requests wait for that lock.
//
// The holder is the test binary itself: a package whose tests use Stopped
// calls Child first thing in its TestMain.
package locktest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/proto"
)

// env names the state file, the key and the limit spec of the bucket a
// holder process holds, one a line.
const env = "SLUICE_LOCKTEST_HOLD"

// Child runs the holder when this process is one (env is set), and
// returns its exit status and true; otherwise it returns false at once.
// The holder attaches to the state file, holds the bucket's lock as a
// decision in progress does, says "held" on stdout, and lets go when its
// stdin closes.
func Child() (int, bool) {
	spec, ok := os.LookupEnv(env)
	if !ok {
		return 0, false
	}
	if err := hold(strings.Split(spec, "\n")); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1, true
	}
	return 0, true
}

func hold(f []string) error {
	if len(f) != 3 {
		return fmt.Errorf("%s: want a state file, a key and a limit, one a line", env)
	}
	pl, err := proto.ParseLimit(f[2])
	if err != nil {
		return err
	}
	l, err := engine.FromProto(pl)
	if err != nil {
		return err
	}
	e, err := engine.Attach(f[0])
	if err != nil {
		return err
	}
	defer e.Close()
	release, err := e.Hold([]byte(f[1]), &l, time.Now().UnixNano())
	if err != nil {
		return err
	}
	fmt.Println("held")
	io.Copy(io.Discard, os.Stdin)
	release()
	return nil
}

// Stopped starts a holder of key's bucket under l in the state file at
// path (which a sidecar serves) and stops it (SIGSTOP) once it holds the
// lock. It returns the holder's pid, and goOn, which lets it go on and
// release the bucket unchanged. The holder is killed after the test if it
// is still there.
func Stopped(t testing.TB, path, key string, l proto.Limit) (pid int, goOn func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+path+"\n"+key+"\n"+l.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	goOn = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGCONT)
			in.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("holder: %v", err)
			}
		})
	}
	t.Cleanup(func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("holder: %q", line)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, goOn
}

// MaxCPUShare is how much of one CPU the tests allow requests waiting on a
// stopped holder to use, process-wide: a few percent is what they use (the
// timer that looks at their locks, on a loaded virtual machine), against
// all of one CPU and more for waiters that spin.
const MaxCPUShare = 0.25

// CPUShare returns the share of one CPU this process uses over the next
// window, with the CPU time and the wall time measured.
func CPUShare(t testing.TB, window time.Duration) (share float64, cpu, wall time.Duration) {
	t.Helper()
	cpu0, wall0 := processCPU(t), time.Now()
	time.Sleep(window) // the window measured, not a synchronisation
	cpu, wall = processCPU(t)-cpu0, time.Since(wall0)
	return float64(cpu) / float64(wall), cpu, wall
}

// processCPU returns the CPU time this process has used (user and system).
func processCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
