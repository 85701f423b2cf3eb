package redistest

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Proxy is a Unix socket in front of a server that delays every byte sent
// to it by a fixed time, as a distant Redis would (a round trip then takes
// the delay more); the replies come back at once. Bytes keep their order.
type Proxy struct {
	// Addr is the proxy's socket path, to use in place of the server's.
	Addr string

	ln    net.Listener
	delay time.Duration
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartProxy starts a proxy in front of s delaying each request by delay,
// closed at cleanup.
func StartProxy(t testing.TB, s *Server, delay time.Duration) *Proxy {
	t.Helper()
	p := &Proxy{Addr: filepath.Join(tempDir(t), "proxy.sock"), delay: delay}
	ln, err := net.Listen("unix", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(s.Network, s.Addr)
	t.Cleanup(p.close)
	return p
}

func (p *Proxy) accept(network, addr string) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		r, err := net.Dial(network, addr)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, r)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.delayed(r, c)
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
	}
}

// delayed copies src to dst, each chunk delay after it was read.
func (p *Proxy) delayed(dst, src net.Conn) {
	defer p.wg.Done()
	type chunk struct {
		at time.Time
		b  []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 64<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{time.Now().Add(p.delay), b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	for range q { // let the reader finish
	}
}

// close stops the proxy and its connections.
func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	os.Remove(p.Addr)
}
