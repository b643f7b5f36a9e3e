package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EtcdURL is the client URL of the cluster's etcd (the same across
// StopEtcd/StartEtcd).
func (c *Cluster) EtcdURL() string { return c.env.ControlPlane.Etcd.URL.String() }

// StopEtcd crashes the cluster's etcd (SIGKILL, as when its node or process
// dies) and waits until the process is gone. Its data directory and client
// port are kept, so StartEtcd brings the same store back at the same
// address. The kube-apiserver keeps running and sees etcd unreachable.
func (c *Cluster) StopEtcd() error {
	e := c.env.ControlPlane.Etcd
	if e == nil || e.URL == nil {
		return errors.New("testenv: no etcd")
	}
	c.etcdMu.Lock()
	defer c.etcdMu.Unlock()
	pid := childPID("etcd", "--listen-client-urls="+e.URL.String())
	if pid == 0 {
		return fmt.Errorf("testenv: no running etcd of %s (listening on %s) started by this process", c.Name, e.URL)
	}
	// From now on envtest no longer owns a temporary data directory (the
	// restarted etcd reuses it): Stop removes it.
	c.etcdDataDir = e.DataDir
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("testenv: killing etcd: %w", err)
	}
	return waitGone(pid, 30*time.Second)
}

// StartEtcd starts the etcd stopped by StopEtcd again, with the same data
// directory and client URL, and waits until it reports healthy.
func (c *Cluster) StartEtcd() error {
	c.etcdMu.Lock()
	defer c.etcdMu.Unlock()
	if c.etcdDataDir == "" {
		return errors.New("testenv: StartEtcd without StopEtcd")
	}
	e := c.env.ControlPlane.Etcd
	// envtest's Start reuses DataDir and URL when they are set.
	e.DataDir = c.etcdDataDir
	if err := e.Start(); err != nil {
		return fmt.Errorf("testenv: restarting etcd of %s: %w", c.Name, err)
	}
	return nil
}

// APIServerPID is the process ID of the cluster's kube-apiserver, or 0 if
// it is not running (as a child of this process).
func (c *Cluster) APIServerPID() int {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return 0
	}
	return childPID("kube-apiserver", "--secure-port="+u.Port())
}

// EtcdPID is the process ID of the cluster's etcd, or 0 if it is not
// running (as a child of this process).
func (c *Cluster) EtcdPID() int {
	e := c.env.ControlPlane.Etcd
	if e == nil || e.URL == nil {
		return 0
	}
	return childPID("etcd", "--listen-client-urls="+e.URL.String())
}

// childPID finds a child process of this process running binary with the
// argument arg (exactly).
func childPID(binary, arg string) int {
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != self || fields[0] == "Z" {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "/"+binary) && args[0] != binary {
			continue
		}
		for _, a := range args[1:] {
			if a == arg {
				pid, _ := strconv.Atoi(e.Name())
				return pid
			}
		}
	}
	return 0
}

// waitGone waits until pid has exited and been reaped (envtest waits for
// its children).
func waitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("testenv: process %d still there after %s", pid, timeout)
}
