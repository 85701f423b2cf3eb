// Package echo is the physical floor of the socket path: a bare
// Unix-socket server that answers every native request frame with a frame
// of a decision's size, one write per read. Whatever the sidecar spends
// above it is protocol and decision work. The sidecar's benchmarks and
// sluice-bench's comparison share it.
package echo

import (
	"net"

	"github.com/sluicehq/sluice/proto"
)

// AnswerLen is the size of the echo's answer to a frame: a response frame
// holding one decision, byte for byte the size of the sidecar's answer.
var AnswerLen = len(decisionFrame())

// decisionFrame is the echo's answer to a frame.
func decisionFrame() []byte {
	b, start := proto.BeginFrame(nil, proto.KindResponse, 1)
	return proto.EndFrame(proto.AppendDecision(b, proto.OpAcquire, &proto.Decision{Allowed: true, Remaining: 99, Limit: 100, RetryAfter: -1}), start, 1)
}

// Serve answers frames on ln's connections until ln is closed: one
// read, then one write holding an answer for every complete frame read.
func Serve(ln net.Listener) error {
	answer := decisionFrame()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			in, out := make([]byte, 0, 64<<10), make([]byte, 0, 64<<10)
			for {
				if len(in) == cap(in) {
					return // a frame larger than the buffer: not ours
				}
				n, err := c.Read(in[len(in):cap(in)])
				if err != nil {
					return
				}
				in = in[:len(in)+n]
				rest := in
				for {
					frame, r, _, err := proto.SplitFrame(rest)
					if err != nil {
						return
					}
					if frame == nil {
						break
					}
					out = append(out, answer...)
					rest = r
				}
				in = in[:copy(in, rest)]
				if len(out) > 0 {
					if _, err := c.Write(out); err != nil {
						return
					}
					out = out[:0]
				}
			}
		}()
	}
}
