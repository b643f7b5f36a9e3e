// Package devenv runs a whole Fleet on one machine for the quickstart
// (`fleet dev up|down`): three embedded control planes (an upstream manager
// cluster and two downstream clusters, each a real kube-apiserver + etcd),
// the fleet-controller and one fleet-agent per downstream cluster as real
// child processes, one cluster registered agent-initiated (env=dev) and one
// manager-initiated (env=prod), and an example git repository served over
// HTTP with a GitRepo pointing at it.
//
// Everything lives in a state folder (default .fleet-dev in the repository):
// etcd data, certificates and service-account keys, kubeconfigs, logs, the
// example repository and its working copy. A second `up` resumes from it;
// `down` stops whatever still runs and removes it.
package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/scheme"
)

// DefaultBasePort is the first of the fixed ports the quickstart uses.
const DefaultBasePort = 16440

// Options configure a dev environment. Zero values mean the defaults.
type Options struct {
	// RepoRoot is the Fleet source tree (binaries are built there and
	// examples/ is read from it). Default: found upwards from the working
	// directory.
	RepoRoot string
	// StateDir keeps everything; default <RepoRoot>/.fleet-dev.
	StateDir string
	// AssetsDir holds kube-apiserver and etcd; default $KUBEBUILDER_ASSETS
	// or <RepoRoot>/bin/controlplane.
	AssetsDir string
	// BasePort fixes every port: API servers at +0..+2, etcd at +10..+15,
	// the git server at +20. Default DefaultBasePort, or what the state
	// folder was created with.
	BasePort int
	// SkipBuild uses the binaries already in bin/.
	SkipBuild bool
	// Out receives progress; default os.Stdout.
	Out io.Writer
	// Live redraws the fleet status while waiting (for a terminal);
	// otherwise progress is printed line by line.
	Live bool
	// ReadyTimeout bounds the wait for every bundle to be Ready; zero
	// waits until the context ends.
	ReadyTimeout time.Duration
	// CheckinInterval is the agents' heartbeat; default 15s.
	CheckinInterval time.Duration
	// PollingInterval is the GitRepo's; default 5s.
	PollingInterval time.Duration
}

// Ports are the fixed ports of one state folder.
type Ports struct {
	Base int `json:"basePort"`
	API  [3]int
	Etcd [3]int
	Peer [3]int
	Git  int
}

func portsFrom(base int) Ports {
	p := Ports{Base: base, Git: base + 20}
	for i := range 3 {
		p.API[i] = base + i
		p.Etcd[i] = base + 10 + 2*i
		p.Peer[i] = base + 11 + 2*i
	}
	return p
}

// state is state.json: what must stay the same across runs.
type state struct {
	BasePort int `json:"basePort"`
}

// Env is a running dev environment.
type Env struct {
	opts  Options
	ports Ports
	table *procTable

	planes   []*controlPlane // upstream, dev, prod
	children []*proc         // controller and agents
	git      *gitServer
	started  time.Time
	// resumed says the state folder existed: the guide then suggests an
	// edit that still changes something after an earlier run's.
	resumed bool
}

// ResumeHint is how to start the kept state folder again. bin/fleet is what
// the quickstart builds; `fleet` alone is usually not on PATH. A folder
// other than the default must be named again with --state-dir, and `make
// quickstart` cannot: a plain `bin/fleet dev up` would resume (or create)
// the default one instead.
func (o Options) ResumeHint() string {
	if err := o.defaults(); err != nil || o.StateDir == filepath.Join(o.RepoRoot, ".fleet-dev") {
		return "`bin/fleet dev up` (or `make quickstart`) resumes it, `bin/fleet dev down` removes it"
	}
	flag := "--state-dir " + shellQuote(o.StateDir)
	return "`bin/fleet dev up " + flag + "` resumes it, `bin/fleet dev down " + flag + "` removes it"
}

// shellQuote quotes a path for a command to copy and paste when it holds
// anything a shell would split or expand.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// errAlreadyRunning: another `fleet dev up` owns the state folder. Retrying
// or resuming does not help until that one stops.
var errAlreadyRunning = errors.New("another `fleet dev up` is running")

// downMarker is created in the state folder by `fleet dev down` before it
// stops a running `up`, so that `up` does not promise to resume a state
// that is about to be removed.
const downMarker = "down-requested"

// Cluster names of the three control planes, which are also their folders.
const (
	Upstream = "upstream"
	Dev      = "dev"
	Prod     = "prod"
)

func (o *Options) defaults() error {
	if o.RepoRoot == "" {
		root, err := FindRepoRoot()
		if err != nil {
			return err
		}
		o.RepoRoot = root
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.RepoRoot, ".fleet-dev")
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return err
	}
	o.StateDir = abs
	if o.AssetsDir == "" {
		o.AssetsDir = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if o.AssetsDir == "" {
		o.AssetsDir = filepath.Join(o.RepoRoot, "bin", "controlplane")
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.CheckinInterval == 0 {
		o.CheckinInterval = 15 * time.Second
	}
	if o.PollingInterval == 0 {
		o.PollingInterval = 5 * time.Second
	}
	return nil
}

// FindRepoRoot walks up from the working directory to the Fleet module.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/fleetgo/fleet\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the Fleet source tree (no go.mod of github.com/fleetgo/fleet above the working directory); run from the repository or pass --repo")
		}
		dir = parent
	}
}

// Up builds what is missing, starts (or resumes) everything and waits until
// every bundle of the example GitRepo is Ready on both clusters. On success
// the processes keep running until Stop; on failure everything started is
// stopped and the state folder is kept for the next try.
func Up(ctx context.Context, opts Options) (env *Env, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	e := &Env{opts: opts, started: time.Now()}
	defer func() {
		if err != nil && !errors.Is(err, errAlreadyRunning) {
			e.Stop()
			if !opts.DownRequested() {
				err = fmt.Errorf("%w\n\nThe state is kept in %s: %s", err, opts.StateDir, opts.ResumeHint())
			}
		}
	}()
	if err := e.prepareState(ctx); err != nil {
		return nil, err
	}
	if err := e.build(ctx); err != nil {
		return nil, err
	}
	if err := e.startControlPlanes(ctx); err != nil {
		return nil, err
	}
	if err := e.ensureExampleRepo(ctx); err != nil {
		return nil, err
	}
	if err := e.startGitServer(); err != nil {
		return nil, err
	}
	if err := e.setupFleet(ctx); err != nil {
		return nil, err
	}
	if err := e.waitAllReady(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// prepareState creates or reads the state folder, refuses to run twice on
// it, cleans up after a killed run and checks that every port is free.
func (e *Env) prepareState(ctx context.Context) error {
	o := &e.opts
	if err := ensureDir(o.StateDir); err != nil {
		return err
	}
	st := state{}
	b, err := os.ReadFile(e.statePath())
	switch {
	case err == nil:
		if jerr := json.Unmarshal(b, &st); jerr != nil {
			return fmt.Errorf("%s is corrupt (%v)", e.statePath(), jerr)
		}
		if o.BasePort != 0 && o.BasePort != st.BasePort {
			return fmt.Errorf("this state folder uses base port %d (its clusters and agent credentials have those addresses); "+
				"drop --base-port, or run `bin/fleet dev down` first to start over on %d", st.BasePort, o.BasePort)
		}
		e.resumed = true
	case errors.Is(err, os.ErrNotExist):
		st.BasePort = o.BasePort
		if st.BasePort == 0 {
			st.BasePort = DefaultBasePort
		}
		b, _ := json.Marshal(st)
		if err := os.WriteFile(e.statePath(), b, 0o644); err != nil {
			return err
		}
		e.logf("Creating a dev environment in %s", o.StateDir)
	default:
		return err
	}
	e.ports = portsFrom(st.BasePort)

	old, err := readProcTable(e.pidPath())
	if err != nil {
		return err
	}
	if old != nil {
		if cl := readCmdline(old.Self); old.Self != os.Getpid() && alive(old.Self, "") && strings.Contains(cl, "dev") && !strings.Contains(cl, "dev down") {
			return fmt.Errorf("%w (pid %d) on %s; nothing was started. Use that one, or stop it with Ctrl-C in its terminal "+
				"(`bin/fleet dev down` stops it and removes the state)", errAlreadyRunning, old.Self, o.StateDir)
		}
	}
	// Said only now: a refusal above is not a resume.
	if e.resumed {
		e.logf("Resuming the dev environment in %s", o.StateDir)
	}
	// A marker of an earlier `down` that did not finish is stale.
	_ = os.Remove(filepath.Join(o.StateDir, downMarker))
	if old != nil {
		if killed := killLeftovers(ctx, old, o.StateDir); len(killed) > 0 {
			e.logf("Stopped processes left over by an earlier run: %s", strings.Join(killed, ", "))
		}
	}
	e.table = &procTable{path: e.pidPath(), Self: os.Getpid(), Pids: map[string]int{}}
	if err := e.table.save(); err != nil {
		return err
	}
	return checkPorts(e.ports)
}

func checkPorts(p Ports) error {
	named := map[int]string{p.Git: "git server"}
	for i, n := range []string{Upstream, Dev, Prod} {
		named[p.API[i]] = n + " API server"
		named[p.Etcd[i]] = n + " etcd"
		named[p.Peer[i]] = n + " etcd peer"
	}
	for port, what := range named {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return portError(what, port, err)
		}
		ln.Close()
	}
	return nil
}

func portError(what string, port int, err error) error {
	return fmt.Errorf("port 127.0.0.1:%d (%s) is not free: %v.\n"+
		"Another `fleet dev up` may still be running (Ctrl-C it, or `bin/fleet dev down`), or another program uses it; "+
		"a fresh state folder can use other ports with `bin/fleet dev up --base-port N` (ports N..N+20)", port, what, err)
}

func (e *Env) startControlPlanes(ctx context.Context) error {
	e.phase("starting 3 control planes (kube-apiserver + etcd): upstream, dev, prod")
	errs := make(chan error, 3)
	for i, name := range []string{Upstream, Dev, Prod} {
		cp := &controlPlane{
			name: name, dir: filepath.Join(e.opts.StateDir, name), assets: e.opts.AssetsDir,
			apiPort: e.ports.API[i], etcdPort: e.ports.Etcd[i], peerPort: e.ports.Peer[i],
		}
		e.planes = append(e.planes, cp)
	}
	for _, cp := range e.planes {
		go func() { errs <- cp.start(ctx, e.table) }()
	}
	var all []error
	for range e.planes {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	for _, cp := range e.planes {
		e.logf("    %-8s %s  (kubeconfig %s)", cp.name, cp.url(), cp.kubeconfig())
	}
	return nil
}

// Stop stops the agents, the manager, the git server and the control
// planes, in that order. The state folder stays.
func (e *Env) Stop() {
	for i := len(e.children) - 1; i >= 0; i-- {
		e.children[i].stop(15 * time.Second)
		if e.table != nil {
			e.table.remove(e.children[i].name)
		}
	}
	e.children = nil
	e.git.stop()
	e.git = nil
	for _, cp := range e.planes {
		cp.stop(e.table)
	}
	e.planes = nil
	if e.table != nil {
		_ = os.Remove(e.pidPath())
	}
}

// Down stops whatever a `fleet dev up` on this state folder still runs and
// removes the folder.
func Down(ctx context.Context, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	out := opts.Out
	if !fileExists(opts.StateDir) {
		fmt.Fprintf(out, "Nothing to do: %s does not exist.\n", opts.StateDir)
		return nil
	}
	if !fileExists(filepath.Join(opts.StateDir, "state.json")) {
		return fmt.Errorf("%s has no state.json, so it is not a `fleet dev` state folder; not removing it", opts.StateDir)
	}
	t, err := readProcTable(filepath.Join(opts.StateDir, "pids.json"))
	if err != nil {
		return err
	}
	if t != nil {
		if t.Self != os.Getpid() && alive(t.Self, "") && strings.Contains(readCmdline(t.Self), "dev") {
			if err := os.WriteFile(filepath.Join(opts.StateDir, downMarker), nil, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(out, "Stopping `fleet dev up` (pid %d)...\n", t.Self)
			_ = signalTerm(t.Self)
			deadline := time.Now().Add(90 * time.Second)
			for alive(t.Self, "") && time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(300 * time.Millisecond)
			}
		}
		if killed := killLeftovers(ctx, t, opts.StateDir); len(killed) > 0 {
			fmt.Fprintf(out, "Stopped %s\n", strings.Join(killed, ", "))
		}
	}
	if err := os.RemoveAll(opts.StateDir); err != nil {
		return err
	}
	fmt.Fprintf(out, "Removed %s.\n", opts.StateDir)
	return nil
}

// DownRequested says a `fleet dev down` is stopping the `up` of this state
// folder (or already removed it), so the state is not kept for a resume.
func (o Options) DownRequested() bool {
	if err := o.defaults(); err != nil {
		return false
	}
	return fileExists(filepath.Join(o.StateDir, downMarker)) || !fileExists(filepath.Join(o.StateDir, "state.json"))
}

func (e *Env) statePath() string { return filepath.Join(e.opts.StateDir, "state.json") }
func (e *Env) pidPath() string   { return filepath.Join(e.opts.StateDir, "pids.json") }
func (e *Env) gitRoot() string   { return filepath.Join(e.opts.StateDir, "git") }
func (e *Env) binDir() string    { return filepath.Join(e.opts.RepoRoot, "bin") }

// WorkingCopy is the clone of the example repository to edit and push.
func (e *Env) WorkingCopy() string { return filepath.Join(e.opts.StateDir, "examples") }

// RepoURL is the HTTP URL of the example repository.
func (e *Env) RepoURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/%s", e.ports.Git, repoName)
}

// Kubeconfig returns the admin kubeconfig path of Upstream, Dev or Prod.
func (e *Env) Kubeconfig(name string) string {
	return filepath.Join(e.opts.StateDir, name, "kubeconfig")
}

// Config returns the admin rest config of a running control plane.
func (e *Env) Config(name string) *rest.Config {
	for _, cp := range e.planes {
		if cp.name == name {
			return rest.CopyConfig(cp.config)
		}
	}
	return nil
}

// Client returns an admin client of a running control plane.
func (e *Env) Client(name string) (client.Client, error) {
	cfg := e.Config(name)
	if cfg == nil {
		return nil, fmt.Errorf("no running cluster %q", name)
	}
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
}

// Failed returns an error when a child process has exited on its own.
func (e *Env) Failed() error {
	for _, p := range e.children {
		if p.exited() {
			return p.failure()
		}
	}
	for _, cp := range e.planes {
		for _, p := range []*proc{cp.etcd, cp.apiserver} {
			if p != nil && p.exited() {
				return p.failure()
			}
		}
	}
	return nil
}

func (e *Env) logf(format string, args ...any) {
	fmt.Fprintf(e.opts.Out, format+"\n", args...)
}

// phase prints a numbered step with the time since start.
func (e *Env) phase(what string) {
	e.logf("[%5s] %s", time.Since(e.started).Round(time.Second), what)
}

func readCmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}
