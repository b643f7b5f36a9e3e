package devenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetgo/fleet/internal/version"
)

// build compiles the three binaries into bin/ and, when kube-apiserver or
// etcd is missing, builds them with `make controlplane`, streaming its
// output so that the long first build shows progress.
func (e *Env) build(ctx context.Context) error {
	if !e.opts.SkipBuild {
		if _, err := exec.LookPath("go"); err != nil {
			return errors.New("the Go toolchain is needed to build Fleet: install Go (https://go.dev/dl) and make sure `go` is on your PATH, " +
				"or pass --no-build to use the binaries already in bin/")
		}
		e.phase("building bin/fleet, bin/fleet-controller, bin/fleet-agent")
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", version.BuildTags, "-o", e.binDir()+string(filepath.Separator),
			"./cmd/fleet", "./cmd/fleet-controller", "./cmd/fleet-agent")
		cmd.Dir = e.opts.RepoRoot
		if err := e.stream(cmd, "go build"); err != nil {
			return fmt.Errorf("building the binaries failed: %w", err)
		}
	}
	for _, b := range []string{"fleet-controller", "fleet-agent"} {
		if !fileExists(filepath.Join(e.binDir(), b)) {
			return fmt.Errorf("%s is missing in %s: run `make build` (or drop --no-build)", b, e.binDir())
		}
	}
	if fileExists(filepath.Join(e.opts.AssetsDir, "kube-apiserver")) && fileExists(filepath.Join(e.opts.AssetsDir, "etcd")) {
		return nil
	}
	if !sameDir(e.opts.AssetsDir, filepath.Join(e.binDir(), "controlplane")) {
		return fmt.Errorf("kube-apiserver or etcd is missing in %s (KUBEBUILDER_ASSETS)", e.opts.AssetsDir)
	}
	if _, err := exec.LookPath("make"); err != nil {
		return errors.New("kube-apiserver and etcd are not built yet and `make` is not installed; install make and run `make controlplane`")
	}
	e.phase("building kube-apiserver and etcd from source (first time only; this takes several minutes)")
	cmd := exec.CommandContext(ctx, "make", "controlplane")
	cmd.Dir = e.opts.RepoRoot
	if err := e.stream(cmd, "make controlplane"); err != nil {
		return fmt.Errorf("building the control plane failed: %w (retry with `make controlplane`)", err)
	}
	return nil
}

// stream runs cmd and prints its output, prefixed, plus a heartbeat every
// 20s while it is silent (go build prints nothing while compiling).
func (e *Env) stream(cmd *exec.Cmd, label string) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait(); pw.Close() }()
	start := time.Now()
	tick := time.NewTicker(20 * time.Second)
	defer tick.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return <-waitErr
			}
			if strings.TrimSpace(l) != "" {
				e.logf("    %s: %s", label, l)
			}
		case <-tick.C:
			e.logf("    %s: still working (%s)", label, time.Since(start).Round(time.Second))
		}
	}
}

// sameDir tells whether a and b name the same directory, existing or not.
// The Makefile exports KUBEBUILDER_ASSETS as $(CURDIR)/bin/controlplane,
// a path with symlinks resolved, while the repository root comes from the
// working directory, which keeps them: compared as strings, a checkout
// reached through a symlink would not count its own bin/controlplane as
// the one to build on first use.
func sameDir(a, b string) bool {
	return resolvePath(a) == resolvePath(b)
}

// resolvePath is p made absolute with the symlinks of its longest existing
// prefix resolved; the rest (bin/controlplane before its first build, say)
// is appended as it is.
func resolvePath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if filepath.Dir(dir) == dir {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}
