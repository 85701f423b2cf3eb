package compare

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine stamps a report with what it was measured on.
type Machine struct {
	CPU     string `json:"cpu"`
	Cores   int    `json:"cores"`
	Kernel  string `json:"kernel"`
	Go      string `json:"go"`
	Redis   string `json:"redis,omitempty"`
	Python  string `json:"python,omitempty"`
	RedisPy string `json:"redis_py,omitempty"`
	Date    string `json:"date"`
}

func readMachine() Machine {
	m := Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now().UTC().Format("2006-01-02 15:04 MST")}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	return m
}

// cpuModel is /proc/cpuinfo's first "model name", or the architecture.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return runtime.GOARCH
}
