// Package conntrack tells a test which connections an httptest.Server
// still has open, so that it can check that a client closed its idle
// connections instead of leaving them to the transport's 90 s idle
// timeout. It imports nothing of the project, so any package's tests can
// use it.
package conntrack

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Conns counts the open connections of one server.
type Conns struct {
	mu        sync.Mutex
	open      map[net.Conn]bool
	allClosed chan struct{}
}

// Track counts srv's connections; srv must not be started yet.
func Track(srv *httptest.Server) *Conns {
	c := &Conns{open: map[net.Conn]bool{}, allClosed: make(chan struct{}, 1)}
	srv.Config.ConnState = func(conn net.Conn, s http.ConnState) {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch s {
		case http.StateNew:
			c.open[conn] = true
		case http.StateClosed, http.StateHijacked:
			delete(c.open, conn)
			if len(c.open) == 0 {
				select {
				case c.allClosed <- struct{}{}:
				default:
				}
			}
		}
	}
	return c
}

// WaitClosed fails t unless every connection is closed within timeout.
// The server notices a close when its read ends, so a client that closed
// its end passes at once or nearly; one that left a connection idle keeps
// it for its transport's 90 s, far beyond any timeout a test passes.
func (c *Conns) WaitClosed(t testing.TB, timeout time.Duration, what string) {
	t.Helper()
	c.mu.Lock()
	n := len(c.open)
	c.mu.Unlock()
	if n == 0 {
		return
	}
	select {
	case <-c.allClosed:
	case <-time.After(timeout):
		t.Fatalf("%d connection(s) to %s still open", n, what)
	}
}
