package shm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Ensure the holders registry takes NumHolders tables at once, owner
// included, each with its own tag; the next is refused with an error that
// says how many the file takes; and one that leaves makes room again.
func TestHolders_cap(t *testing.T) {
	owner, path := newFile(t, Options{SlotCount: 16})
	tags := map[uint32]bool{owner.gen: true}
	var atts []*Table
	t.Cleanup(func() {
		for _, a := range atts {
			a.Close()
		}
	})
	for len(atts) < NumHolders-1 {
		a, err := Attach(path)
		if err != nil {
			t.Fatalf("attach %d of %d: %v", len(atts)+2, NumHolders, err)
		}
		if tags[a.gen] || a.gen == 0 || a.gen > maxTag {
			t.Fatalf("attach %d drew tag %d, taken or out of range", len(atts)+2, a.gen)
		}
		tags[a.gen] = true
		atts = append(atts, a)
	}
	if n := len(owner.Holders()); n != NumHolders {
		t.Errorf("%d holders registered, want %d", n, NumHolders)
	}
	_, err := Attach(path)
	if want := fmt.Sprintf("%d processes have it open, the most a state file takes", NumHolders); !errors.Is(err, ErrHolders) || !strings.Contains(err.Error(), want) {
		t.Fatalf("attach past the cap = %v, want ErrHolders saying %q", err, want)
	}
	atts[100].Close()
	a, err := Attach(path)
	if err != nil {
		t.Fatalf("attach after one left: %v", err)
	}
	atts[100] = a
}

// TestHelperAttach is not a test: run by TestHolders_processes in another
// process, it attaches to SHM_TEST_ATTACH's file, says "attached" (or the
// error) on stdout, and stays attached until its stdin closes.
func TestHelperAttach(t *testing.T) {
	path := os.Getenv("SHM_TEST_ATTACH")
	if path == "" {
		t.Skip("a helper process of other tests")
	}
	a, err := Attach(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	fmt.Println("attached")
	io.Copy(io.Discard, os.Stdin)
	a.Close()
	os.Exit(0)
}

// Ensure a pre-fork tier of 100 processes attaches to one file, each a
// holder of its own, and that past the cap a process is refused with the
// number in the error.
func TestHolders_processes(t *testing.T) {
	const procs = 100
	owner, path := newFile(t, Options{SlotCount: 16})
	var cmds []*exec.Cmd
	var ins []io.Closer
	t.Cleanup(func() {
		// All at once: a process of a race-detector build takes a second
		// to exit.
		for _, in := range ins {
			in.Close()
		}
		for _, cmd := range cmds {
			cmd.Wait()
		}
	})
	start := func() (*exec.Cmd, *bufio.Reader, io.Closer) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAttach$")
		cmd.Env = append(os.Environ(), "SHM_TEST_ATTACH="+path)
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
		cmds, ins = append(cmds, cmd), append(ins, in)
		return cmd, bufio.NewReader(out), in
	}
	var outs []*bufio.Reader
	for range procs {
		_, out, _ := start()
		outs = append(outs, out)
	}
	for i, out := range outs {
		if line, _ := out.ReadString('\n'); line != "attached\n" {
			t.Fatalf("process %d: %q", i, line)
		}
	}
	if n := len(owner.Holders()); n != procs+1 {
		t.Fatalf("%d holders, want %d processes and the owner", n, procs+1)
	}
	// Fill the rest of the registry from here, then one process more.
	for range NumHolders - procs - 1 {
		a, err := Attach(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
	}
	cmd, out, _ := start()
	line, _ := out.ReadString('\n')
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(line, strconv.Itoa(NumHolders)+" processes have it open") {
		t.Errorf("the process past the cap: %q, %v", line, err)
	}
}
