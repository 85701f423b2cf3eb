// Command resp-floor is the floor a Redis-protocol server can reach on this
// machine with redis-benchmark as its client: one epoll loop on a locked
// thread that answers every command without deciding anything (PING with
// +PONG, anything else with a CL.THROTTLE-shaped reply of five integers).
// bench/resp-bench.sh runs it beside Redis and Sluice, to show how close
// each is to what the kernel and the client allow.
//
//	resp-floor -socket /tmp/floor.sock
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

var throttleReply = []byte("*5\r\n:0\r\n:15\r\n:14\r\n:-1\r\n:2\r\n")

func main() {
	path := flag.String("socket", "/tmp/resp-floor.sock", "Unix socket to serve")
	flag.Parse()
	os.Remove(*path)
	ln, err := net.Listen("unix", *path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "resp-floor:", err)
		os.Exit(1)
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		<-sig
		ln.Close()
		os.Exit(0)
	}()
	runtime.LockOSThread()
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		fmt.Fprintln(os.Stderr, "resp-floor:", err)
		os.Exit(1)
	}
	bufs := map[int32][]byte{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			raw, _ := c.(*net.UnixConn).SyscallConn()
			var fd int
			raw.Control(func(f uintptr) { fd, _ = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) })
			c.Close()
			ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
			unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev)
		}
	}()
	events := make([]unix.EpollEvent, 256)
	rd := make([]byte, 64<<10)
	out := make([]byte, 0, 64<<10)
	for {
		n, err := unix.EpollWait(epfd, events, -1)
		if err != nil {
			continue
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			m, err := unix.Read(fd, rd)
			if m <= 0 {
				if err != unix.EAGAIN {
					unix.Close(fd)
					delete(bufs, ev.Fd)
				}
				continue
			}
			in := append(bufs[ev.Fd], rd[:m]...)
			out = out[:0]
			for {
				k, ping := command(in)
				if k == 0 {
					break
				}
				if ping {
					out = append(out, "+PONG\r\n"...)
				} else {
					out = append(out, throttleReply...)
				}
				in = in[k:]
			}
			bufs[ev.Fd] = append(bufs[ev.Fd][:0], in...)
			unix.Write(fd, out) // the replies are small: a client that reads them takes them whole
		}
	}
}

// command returns the length of the complete command at the front of b (0
// if it is incomplete) and whether it is PING.
func command(b []byte) (int, bool) {
	if len(b) == 0 || b[0] != '*' {
		i := bytes.Index(b, []byte("\r\n")) // inline
		if i < 0 {
			return 0, false
		}
		return i + 2, bytes.HasPrefix(bytes.ToUpper(b[:i]), []byte("PING"))
	}
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return 0, false
	}
	n, p, ping := atoi(b[1:i]), i+2, false
	for a := range n {
		j := bytes.Index(b[p:], []byte("\r\n"))
		if j < 0 || b[p] != '$' {
			return 0, false
		}
		l := atoi(b[p+1 : p+j])
		p += j + 2
		if len(b) < p+l+2 {
			return 0, false
		}
		if a == 0 && l == 4 && bytes.EqualFold(b[p:p+4], []byte("ping")) {
			ping = true
		}
		p += l + 2
	}
	return p, ping
}

func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		n = n*10 + int(c-'0')
	}
	return n
}
