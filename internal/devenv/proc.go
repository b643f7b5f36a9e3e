package devenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process (etcd, kube-apiserver, fleet-controller or
// fleet-agent) with its output in a log file of the state folder.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// procSpec describes a child process.
type procSpec struct {
	Name string
	Path string
	Args []string
	Dir  string
	// LogPath receives stdout and stderr (appended, so a resumed run keeps
	// the history).
	LogPath string
}

func startProc(spec procSpec) (*proc, error) {
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "\n==== %s: starting %s %s\n", time.Now().Format(time.RFC3339), spec.Path, strings.Join(spec.Args, " "))
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C in the terminal reaches only `fleet dev
	// up`, which then stops the children in order (agents and manager
	// before the API servers). Pdeathsig stops a child if `fleet dev up`
	// itself is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}
	p := &proc{name: spec.Name, cmd: cmd, logPath: spec.LogPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then kills.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// failure explains an unexpected exit with the end of the log.
func (p *proc) failure() error {
	return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 15))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// procTable is the pid file of a running `fleet dev up`: its own pid and
// those of its children, so that `fleet dev down` (or the next `up`) can stop
// whatever a killed run left behind.
type procTable struct {
	mu   sync.Mutex
	path string
	Self int            `json:"self"`
	Pids map[string]int `json:"pids"`
}

func (t *procTable) add(name string, pid int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Pids[name] = pid
	return t.save()
}

func (t *procTable) remove(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.Pids, name)
	_ = t.save()
}

func (t *procTable) save() error {
	b, _ := json.Marshal(t)
	return os.WriteFile(t.path, b, 0o644)
}

func readProcTable(path string) (*procTable, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := &procTable{}
	if err := json.Unmarshal(b, t); err != nil {
		return nil, nil // a torn file from a crash: nothing to trust
	}
	t.path = path
	return t, nil
}

// alive reports whether pid runs and its command line mentions want (so a
// recycled pid of an unrelated process is never signalled).
func alive(pid int, want string) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(cmdline, []byte(want))
}

// killLeftovers stops the children recorded in a pid file whose owner is
// gone. stateDir must appear in each child's command line (every child gets
// a path inside it), which guards against recycled pids.
func killLeftovers(ctx context.Context, t *procTable, stateDir string) []string {
	var killed []string
	for name, pid := range t.Pids {
		if !alive(pid, stateDir) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(15 * time.Second)
		for alive(pid, stateDir) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
		}
		if alive(pid, stateDir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		killed = append(killed, fmt.Sprintf("%s (pid %d)", name, pid))
	}
	return killed
}

func signalTerm(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }
