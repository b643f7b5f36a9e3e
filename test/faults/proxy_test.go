package faults

import (
	"net"
	"sync"
	"testing"
)

// tcpProxy is a real TCP proxy in front of the manager's API server, so a
// test can cut some agents off the network while their processes and the
// server keep running. TLS passes through untouched: the agents still
// verify the API server's certificate (its SANs include 127.0.0.1).
type tcpProxy struct {
	target string
	addr   string

	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]struct{}
	held     bool          // blackholed: no byte goes through
	released chan struct{} // closed when a blackhole ends
	closed   bool
}

// newProxy listens on a free loopback port and forwards to target
// (host:port) until the test ends.
func newProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}, released: make(chan struct{})}
	go p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// URL is the https URL agents use instead of the API server's.
func (p *tcpProxy) URL() string { return "https://" + p.addr }

func (p *tcpProxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.handle(c)
	}
}

func (p *tcpProxy) handle(c net.Conn) {
	defer p.drop(c)
	// A connection opened during a blackhole gets no answer (not even
	// from the TLS handshake) until it ends.
	p.gate()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.drop(up)
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c); done <- struct{}{} }()
	go func() { p.pipe(c, up); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst, holding every chunk while the proxy is
// blackholed: the sender's TCP window fills up and it waits, as across a
// network partition; nothing is lost or reordered.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

func (p *tcpProxy) gate() {
	p.mu.Lock()
	held, ch := p.held, p.released
	p.mu.Unlock()
	if held {
		<-ch
	}
}

func (p *tcpProxy) drop(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// blackhole silently stops every byte in both directions (open
// connections stay open, new ones are accepted but never answered) until
// restore.
func (p *tcpProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held {
		p.held, p.released = true, make(chan struct{})
	}
}

// reset closes every connection and stops listening: clients see their
// connections drop and new ones refused, until restore.
func (p *tcpProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// restore ends a blackhole or a reset (listening again on the same
// address).
func (p *tcpProxy) restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		close(p.released)
	}
	if p.ln == nil && !p.closed {
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return err
		}
		p.ln = ln
		go p.serve(ln)
	}
	return nil
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.restore() // release held goroutines
	p.reset()
}
