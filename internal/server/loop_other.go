//go:build !linux

package server

import (
	"errors"
	"time"
)

const haveEpoll = false

// loops and loop stand for the epoll transport, which needs Linux: Validate
// refuses it elsewhere.
type loops struct{}
type loop struct{}

func startLoops(*server, int) (*loops, error) { return nil, errors.New("server: epoll needs Linux") }
func (ls *loops) next() *loop                 { return nil }
func (ls *loops) drain()                      {}
func (ls *loops) closeAll()                   {}
func (ls *loops) stop()                       {}
func (ls *loops) spinLimit() time.Duration    { return 0 }
func (lp *loop) add(*stream, func(), func())  {}
