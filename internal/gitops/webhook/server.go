package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Server serves a Handler on an address for as long as its context lives.
// It implements controller-runtime's Runnable, and runs on every replica
// (not only the leader): a webhook only records the pushed commit in the
// GitRepo's status, and the leader's controller acts on it.
type Server struct {
	Addr    string
	Handler http.Handler
	// Listening, if set, receives the bound address once serving (tests
	// pass ":0").
	Listening func(addr string)
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	if s.Listening != nil {
		s.Listening(ln.Addr().String())
	}
	mux := http.NewServeMux()
	mux.Handle("/", s.Handler)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// NeedLeaderElection is false: every replica accepts webhooks.
func (s *Server) NeedLeaderElection() bool { return false }
