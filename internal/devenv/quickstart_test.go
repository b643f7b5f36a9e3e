package devenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/statusview"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		w.t.Log(sc.Text())
	}
	return len(p), nil
}

// freeBase finds a base port whose 21 ports are all free, away from the
// quickstart's default so that a developer's running fleet is not touched.
// It stays below Linux's ephemeral range (32768 and up): other test packages
// running at the same time bind random ephemeral ports, which could take a
// port between this check and the moment the control planes bind it.
func freeBase(t *testing.T) int {
	for base := 26440; base < 32700; base += 100 {
		if checkPorts(portsFrom(base)) == nil {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

func configMapData(ctx context.Context, c client.Client, ns, name, key string) string {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		return "<" + err.Error() + ">"
	}
	return cm.Data[key]
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, got := cond()
		if ok {
			return
		}
		last = got
		time.Sleep(time.Second)
	}
	t.Fatalf("%s: not true after %s; last seen: %s", what, timeout, last)
}

// TestQuickstart runs the code path of `fleet dev up` headless: it builds
// the binaries, starts three control planes, the manager and two agents as
// processes, registers dev (agent-initiated) and prod (manager-initiated),
// serves the example repository over HTTP and waits until every bundle is
// Ready on both clusters. It then pushes a commit that changes only the dev
// customization, restarts (resume), and finally tears everything down.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	state := filepath.Join(t.TempDir(), "state")
	opts := Options{
		RepoRoot:     repoRoot(),
		StateDir:     state,
		BasePort:     freeBase(t),
		Out:          logWriter{t},
		ReadyTimeout: 10 * time.Minute,
	}
	env, err := Up(ctx, opts)
	if err != nil {
		t.Fatalf("first `dev up`: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			env.Stop()
		}
	}()

	up, err := env.Client(Upstream)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := env.Client(Dev)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := env.Client(Prod)
	if err != nil {
		t.Fatal(err)
	}

	// What a user sees: all bundles Ready on 2 clusters, in `fleet status`.
	p, err := CheckProgress(ctx, up, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Done || p.Ready != 6 || len(p.Clusters) != 2 {
		t.Fatalf("after up: %s, done=%v, clusters %v", p.Line(), p.Done, p.Clusters)
	}
	if p.Clusters["prod"] != "prod" || p.Clusters["dev"] == "" {
		t.Errorf("clusters by env = %v, want prod registered as Cluster prod and a dev cluster", p.Clusters)
	}
	devCluster := p.Clusters["dev"]
	var snapshot strings.Builder
	if err := statusview.Render(&snapshot, p.View, statusview.RenderOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet status --once:\n%s", snapshot.String())
	if !strings.Contains(snapshot.String(), "6/6 bundle deployments ready, 2 clusters") {
		t.Errorf("status snapshot does not say 6/6 ready on 2 clusters")
	}
	// The same through the built CLI, as the printed guide tells a user.
	cli, err := exec.CommandContext(ctx, filepath.Join(opts.RepoRoot, "bin", "fleet"), "status", "--once",
		"--kubeconfig", env.Kubeconfig(Upstream), "-n", Workspace).CombinedOutput()
	if err != nil || !strings.Contains(string(cli), "6/6 bundle deployments ready, 2 clusters") ||
		!strings.Contains(string(cli), "GitRepo fleet-default/examples") {
		t.Errorf("bin/fleet status --once: %v\n%s", err, cli)
	}

	// Each cluster got its own customization of the Helm chart and of the
	// Kustomize app; the plain manifests are the same everywhere.
	for _, tc := range []struct {
		c          client.Client
		name       string
		greeting   string
		kustomized string
	}{
		{c: dev, name: "dev", greeting: "hello from dev", kustomized: "dev"},
		{c: prod, name: "prod", greeting: "hello from prod", kustomized: "prod"},
	} {
		if got := configMapData(ctx, tc.c, "fleet-examples", "greeter", "greeting"); got != tc.greeting {
			t.Errorf("%s: greeter greeting = %q, want %q", tc.name, got, tc.greeting)
		}
		if got := configMapData(ctx, tc.c, "fleet-examples", "shop-config", "environment"); got != tc.kustomized {
			t.Errorf("%s: shop-config environment = %q, want %q", tc.name, got, tc.kustomized)
		}
		if got := configMapData(ctx, tc.c, "fleet-examples", "simple-settings", "message"); !strings.Contains(got, "examples/simple") {
			t.Errorf("%s: simple-settings message = %q", tc.name, got)
		}
	}

	prodHelmBD := func() string {
		bds := &fleet.BundleDeploymentList{}
		if err := up.List(ctx, bds, client.MatchingLabels{fleet.BundleLabel: GitRepoName + "-helm", fleet.ClusterLabel: "prod"}); err != nil || len(bds.Items) != 1 {
			return fmt.Sprintf("<%v, %d items>", err, len(bds.Items))
		}
		return bds.Items[0].Spec.DeploymentID
	}
	prodDeploymentBefore := prodHelmBD()

	// Push a commit over HTTP that changes only the dev customization.
	work := env.WorkingCopy()
	fy := filepath.Join(work, "helm", "fleet.yaml")
	b, err := os.ReadFile(fy)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fy, []byte(strings.Replace(string(b), `greeting: "hello from dev"`, `greeting: "hello from dev, second commit"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-C", work, "commit", "-q", "-am", "dev: new greeting"}, {"-C", work, "push", "-q"}} {
		if out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	out, err := exec.CommandContext(ctx, "git", "-C", work, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	pushed := strings.TrimSpace(string(out))

	eventually(t, 5*time.Minute, "dev gets the pushed greeting", func() (bool, string) {
		got := configMapData(ctx, dev, "fleet-examples", "greeter", "greeting")
		return got == "hello from dev, second commit", got
	})
	eventually(t, 3*time.Minute, "the GitRepo reports the pushed commit and everything Ready again", func() (bool, string) {
		gr := &fleet.GitRepo{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: Workspace, Name: GitRepoName}, gr); err != nil {
			return false, err.Error()
		}
		p, err := CheckProgress(ctx, up, time.Time{})
		if err != nil {
			return false, err.Error()
		}
		return gr.Status.Commit == pushed && p.Done, "commit " + gr.Status.Commit + ", " + p.Line()
	})
	if got := configMapData(ctx, prod, "fleet-examples", "greeter", "greeting"); got != "hello from prod" {
		t.Errorf("prod greeting = %q after a dev-only change, want it unchanged", got)
	}
	if after := prodHelmBD(); after != prodDeploymentBefore {
		t.Errorf("prod's helm deployment ID changed from %s to %s although its customization did not", prodDeploymentBefore, after)
	}

	// Ctrl-C equivalent: everything stops.
	pids := map[string]int{}
	for k, v := range env.table.Pids {
		pids[k] = v
	}
	if len(pids) != 9 {
		t.Errorf("recorded %d processes, want 9 (3 etcd, 3 kube-apiserver, controller, 2 agents): %v", len(pids), pids)
	}
	env.Stop()
	stopped = true
	for name, pid := range pids {
		if alive(pid, state) {
			t.Errorf("%s (pid %d) still runs after Stop", name, pid)
		}
	}

	// A second `up` resumes: same clusters, no re-registration, the pushed
	// change still deployed.
	opts.SkipBuild = true
	opts.BasePort = 0 // taken from the state folder
	resumed := time.Now()
	env, err = Up(ctx, opts)
	if err != nil {
		t.Fatalf("second `dev up` (resume): %v", err)
	}
	stopped = false
	up, _ = env.Client(Upstream)
	dev, _ = env.Client(Dev)
	// Up returned only once both restarted agents reported again with the
	// credentials they kept (the service-account keys survived).
	p, err = CheckProgress(ctx, up, resumed)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Done || p.CheckedIn != 2 || p.Clusters["dev"] != devCluster || p.Clusters["prod"] != "prod" {
		t.Errorf("after resume: %s, clusters %v, want dev still %s", p.Line(), p.Clusters, devCluster)
	}
	if got := configMapData(ctx, dev, "fleet-examples", "greeter", "greeting"); got != "hello from dev, second commit" {
		t.Errorf("after resume dev greeting = %q", got)
	}
	regs := &fleet.ClusterRegistrationList{}
	if err := up.List(ctx, regs, client.InNamespace(Workspace)); err != nil {
		t.Fatal(err)
	}
	if len(regs.Items) > 2 {
		t.Errorf("resume registered again: %d ClusterRegistrations", len(regs.Items))
	}

	// `dev down` while it runs: stops everything and removes the state.
	pids = map[string]int{}
	for k, v := range env.table.Pids {
		pids[k] = v
	}
	env.Stop()
	stopped = true
	if err := Down(ctx, Options{RepoRoot: opts.RepoRoot, StateDir: state, Out: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state folder still exists after down (%v)", err)
	}
	for name, pid := range pids {
		if alive(pid, state) {
			t.Errorf("%s (pid %d) still runs after down", name, pid)
		}
	}
	if err := checkPorts(env.ports); err != nil {
		t.Errorf("a port is still taken after down: %v", err)
	}
}

// TestDownKillsLeftovers: when `fleet dev up` was killed, `down` stops the
// children it left behind and removes the state.
func TestDownKillsLeftovers(t *testing.T) {
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte(`{"basePort":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stand-in child whose command line names the state folder, as every
	// real child's does: sleep, renamed so that its argv[0] is the folder.
	// (It keeps the default SIGTERM action, so a stop cannot be delayed by a
	// shell deferring its trap.)
	cmd := exec.Command("/bin/bash", "-c", `exec -a "$0" sleep 600`, state)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tbl := &procTable{path: filepath.Join(state, "pids.json"), Self: 0, Pids: map[string]int{"child": cmd.Process.Pid}}
	if err := tbl.save(); err != nil {
		t.Fatal(err)
	}
	// Wait until the rename is visible, so Down can recognise the child.
	eventually(t, 30*time.Second, "the stand-in child runs", func() (bool, string) {
		return alive(cmd.Process.Pid, state), readCmdline(cmd.Process.Pid)
	})
	var out bytes.Buffer
	if err := Down(context.Background(), Options{RepoRoot: repoRoot(), StateDir: state, Out: &out}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		_ = cmd.Process.Kill()
		t.Fatalf("down did not stop the leftover child; down said %q; child status:\n%s", out.String(), st)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state folder still exists after down")
	}
}

// TestPortClash: a taken port gives a clear error before anything starts.
func TestPortClash(t *testing.T) {
	base := freeBase(t)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+20))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Up(context.Background(), Options{RepoRoot: repoRoot(), StateDir: t.TempDir(), BasePort: base, SkipBuild: true, Out: io.Discard})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port 127.0.0.1:%d (git server) is not free", base+20)) || !strings.Contains(err.Error(), "--base-port") {
		t.Fatalf("Up with a taken port: %v", err)
	}
}
