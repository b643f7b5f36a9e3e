package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// apiServerRestartTimeout bounds each step of an API server restart: on two
// busy cores a kube-apiserver (re)start can take well over envtest's 20s
// default, and envtest's answer to a slow start (SIGTERM, then "failed")
// leaves a terminating server on the port for the next attempt to mistake
// for itself.
const apiServerRestartTimeout = 2 * time.Minute

// StopAPIServer crashes the cluster's kube-apiserver (SIGKILL, as when its
// node dies) and waits until the process is gone and its port refuses
// connections. Etcd keeps running. The serving certificate, client CA and
// service-account keys are kept, so StartAPIServer brings back the same
// server at the same address: existing clients and tokens keep working.
func (c *Cluster) StopAPIServer() error {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	s := c.env.ControlPlane.APIServer
	if c.apiCertDir == "" {
		// envtest removes the directory it created when it stops the
		// server; the restarted server needs a copy that lives as long as
		// the cluster (Stop removes it).
		dir, err := os.MkdirTemp("", "fleet-testenv-apiserver-")
		if err != nil {
			return err
		}
		if err := copyFiles(s.CertDir, dir); err != nil {
			_ = os.RemoveAll(dir)
			return err
		}
		c.apiCertDir = dir
	}
	pid := c.APIServerPID()
	if pid == 0 {
		return fmt.Errorf("testenv: no running kube-apiserver of %s started by this process", c.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("testenv: killing kube-apiserver: %w", err)
	}
	// envtest reaps the process; the error only says it did not exit on
	// its own.
	_ = s.Stop()
	if err := waitGone(pid, 30*time.Second); err != nil {
		return err
	}
	return waitPortClosed(c.apiServerAddr(), 30*time.Second)
}

// StartAPIServer starts the kube-apiserver stopped by StopAPIServer again
// (same port, certificates and keys) and waits until it reports ready on
// /readyz, which includes its authorizer's caches: a server that only
// answers /healthz may still refuse a client its RBAC grants.
func (c *Cluster) StartAPIServer() error {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	if c.apiCertDir == "" {
		return errors.New("testenv: StartAPIServer without StopAPIServer")
	}
	s := c.env.ControlPlane.APIServer
	s.CertDir = c.apiCertDir
	s.StartTimeout = apiServerRestartTimeout
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = s.Start(); err == nil {
			break
		}
		// A start that timed out or lost the port leaves a process behind
		// (envtest only sends it SIGTERM): make sure it is gone before the
		// next attempt, so that attempt's health check cannot reach it.
		if pid := c.APIServerPID(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = s.Stop()
			_ = waitGone(pid, 30*time.Second)
		}
		if perr := waitPortClosed(c.apiServerAddr(), 30*time.Second); perr != nil {
			return perr
		}
	}
	if err != nil {
		return fmt.Errorf("testenv: restarting kube-apiserver of %s: %w", c.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiServerRestartTimeout)
	defer cancel()
	for {
		_, rerr := c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if rerr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: restarted kube-apiserver of %s not ready: %w", c.Name, rerr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// apiServerAddr is the host:port the API server listens on.
func (c *Cluster) apiServerAddr() string {
	ss := c.env.ControlPlane.APIServer.SecureServing
	return net.JoinHostPort(ss.Address, ss.Port)
}

// waitPortClosed waits until nothing accepts connections on addr.
func waitPortClosed(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		_ = conn.Close()
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("testenv: %s still accepts connections after %s", addr, timeout)
}

// copyFiles copies the regular files of directory from into directory to.
func copyFiles(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
