package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a running child process of the harness.
type child struct {
	role    string
	cmd     *exec.Cmd
	pprof   string // host:port of its pprof server
	baseRSS int64  // resident set before its work started
	// baseAnon is its anonymous part (heap, stacks), without the pages
	// of the binary's code and data it had touched.
	baseAnon int64
	exited   chan error
}

// startChild starts role and waits for its READY line.
func startChild(role, dir string, cfg childConfig) (*child, error) {
	cmd, err := childCommand(role, dir, cfg)
	if err != nil {
		return nil, err
	}
	return startProcess(role, dir, cmd, true)
}

// startProcess starts cmd, logging to <dir>/<role>.log; with ready it
// waits for the READY line of a harness child.
func startProcess(role, dir string, cmd *exec.Cmd, ready bool) (*child, error) {
	logf, err := os.Create(filepath.Join(dir, role+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{role: role, cmd: cmd, exited: make(chan error, 1)}
	readyCh := make(chan struct{})
	if !ready {
		close(readyCh)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "PPROF "):
				c.pprof = strings.TrimPrefix(line, "PPROF ")
			case strings.HasPrefix(line, "READY rss="):
				for _, f := range strings.Fields(strings.TrimPrefix(line, "READY ")) {
					k, v, _ := strings.Cut(f, "=")
					n, _ := strconv.ParseInt(v, 10, 64)
					switch k {
					case "rss":
						c.baseRSS = n
					case "anon":
						c.baseAnon = n
					}
				}
				close(readyCh)
			}
			_, _ = fmt.Fprintln(logf, line)
		}
	}()
	go func() { c.exited <- cmd.Wait(); _ = logf.Close() }()
	select {
	case <-readyCh:
		return c, nil
	case err := <-c.exited:
		return nil, fmt.Errorf("%s exited before it was ready: %v (see %s)", role, err, logf.Name())
	case <-time.After(2 * time.Minute):
		c.stop()
		return nil, fmt.Errorf("%s not ready within 2m (see %s)", role, logf.Name())
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// alive fails when the child has exited.
func (c *child) alive() error {
	select {
	case err := <-c.exited:
		c.exited <- err
		return fmt.Errorf("%s exited: %v", c.role, err)
	default:
		return nil
	}
}

// stop ends the child (SIGTERM, then SIGKILL after 15s).
func (c *child) stop() {
	if c == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}
