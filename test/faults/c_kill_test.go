package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/testenv"
	"github.com/fleetgo/fleet/internal/version"
)

// Fault 1: the controller dies mid-rollout (every request of the process
// fails at once, then it stops) and a new one starts. The rollout
// completes; no BundleDeployment that was already right is written again
// (generation and resourceVersion unchanged) and no simulated agent
// applies anything twice.
func TestControllerKilledMidRollout(t *testing.T) {
	killMidRollout(t, "kill", 40, func() func() {
		m := startManager(t, manager.Options{AgentCheckinInterval: 5 * time.Second, Workers: 2})
		return func() { m.kill(); m.stop(t) }
	})
}

// The same with the fleet-controller binary, killed with SIGKILL, at a
// few hundred simulated clusters: $FLEET_FAULTS_CLUSTERS (default 300,
// status-only agents; about 45 s on 2 cores).
func TestControllerProcessSIGKILLMidRollout(t *testing.T) {
	n := 300
	if s := os.Getenv("FLEET_FAULTS_CLUSTERS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("FLEET_FAULTS_CLUSTERS=%q: want a positive number", s)
		}
	}
	bin := filepath.Join(t.TempDir(), "fleet-controller")
	build := exec.Command("go", "build", "-tags", version.BuildTags, "-o", bin, "./cmd/fleet-controller")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fleet-controller: %v\n%s", err, out)
	}
	logs := t.TempDir()
	started := 0
	t.Cleanup(func() { // before the directory is removed
		if t.Failed() {
			for i := range started {
				logTail(t, filepath.Join(logs, fmt.Sprintf("fleet-controller-%d.log", i)), 40)
			}
		}
	})
	killMidRollout(t, "sigkill", n, func() func() {
		cmd := exec.Command(bin, "--kubeconfig", upstream.Kubeconfig, "--agent-checkin-interval", "5s",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--webhook-bind-address", "0",
			"--leader-elect=false", "--bootstrap-namespace", "", "--workers", "2",
			// The API server cannot reach a pod network here: content API on
			// loopback, registered as ExternalName (as `fleet dev` does).
			"--content-api-addr", "127.0.0.1:0", "--content-api-external-name", "127.0.0.1")
		out, err := os.Create(filepath.Join(logs, fmt.Sprintf("fleet-controller-%d.log", started)))
		if err != nil {
			t.Fatal(err)
		}
		started++
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kill := func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			_ = out.Close()
		}
		t.Cleanup(kill)
		return kill
	})
}

// killMidRollout runs a rollout to n simulated clusters, kills the
// controller started by start once part of it is written, starts another
// one and checks the outcome.
func killMidRollout(t *testing.T, name string, n int, start func() (kill func())) {
	g := NewWithT(t)
	name = freshName(name)
	ws := "faults-" + name
	all := map[string]string{"fault": name}
	killFirst := start()
	v := newWorkspace(t, ws, name+"-token")
	registering := time.Now()
	sim, _ := startSimulators(t, v, n, name, all, 5*time.Second)
	waitCheckedIn(t, ws, all, n)
	t.Logf("%d simulated clusters registered and checked in in %s", n, since(registering))

	putBundle(t, ws, name+"-steady", "v1", all, name+"-steady")
	putBundle(t, ws, name+"-moving", "v1", all, name+"-moving")
	allDeployed := func(g Gomega, name string) map[string]fleet.BundleDeployment {
		bds := bundleDeployments(g, ws, name)
		g.Expect(bds).To(HaveLen(n))
		for c, bd := range bds {
			g.Expect(deployedID(bd)).To(BeTrue(), "%s/%s: %+v", name, c, bd.Status)
		}
		return bds
	}
	var steady, movingV1 map[string]fleet.BundleDeployment
	deploying := time.Now()
	defer func() { t.Logf("test body after registration took %s", since(deploying)) }()
	g.Eventually(func(g Gomega) {
		steady = allDeployed(g, name+"-steady")
		movingV1 = allDeployed(g, name+"-moving")
	}, wait, tick).Should(Succeed())
	g.Eventually(sim.Stats.Applied.Load, wait, tick).Should(BeEquivalentTo(2 * n))

	// Roll out v2 and kill the controller as soon as it has written a
	// quarter of the BundleDeployments (seen through a watch, to react at
	// once).
	wc, err := client.NewWithWatch(upstream.Config, client.Options{Scheme: testenv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	watchMoving := func() watch.Interface {
		w, err := wc.Watch(context.Background(), &fleet.BundleDeploymentList{}, client.MatchingLabels{
			fleet.BundleNamespaceLabel: ws, fleet.BundleLabel: name + "-moving"})
		g.Expect(err).NotTo(HaveOccurred())
		return w
	}
	w := watchMoving()
	putBundle(t, ws, name+"-moving", "v2", all, name+"-moving")
	timeout := time.After(wait)
	written := map[string]bool{}
	for len(written) < max(1, n/4) {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				// The API server may close a watch (a consumer it finds
				// slow on a busy machine); a new one starts with every
				// deployment as it is now.
				t.Logf("the watch of the rollout was closed after %d written; watching again", len(written))
				w = watchMoving()
				continue
			}
			if bd, ok := ev.Object.(*fleet.BundleDeployment); ok &&
				bd.Spec.DeploymentID != movingV1[bd.Labels[fleet.ClusterLabel]].Spec.DeploymentID {
				written[bd.Name+"/"+bd.Namespace] = true
			}
		case <-timeout:
			t.Fatalf("the rollout did not get going: %d BundleDeployments written", len(written))
		}
	}
	w.Stop()
	killFirst()
	killed := time.Now()
	time.Sleep(time.Second) // anything in flight has landed
	atKill := map[string]fleet.BundleDeployment{}
	g.Eventually(func(g Gomega) { atKill = bundleDeployments(g, ws, name+"-moving") }, wait, tick).Should(Succeed())
	var wantID string
	done := 0
	for c, bd := range atKill {
		if bd.Spec.DeploymentID != movingV1[c].Spec.DeploymentID {
			done++
			wantID = bd.Spec.DeploymentID
		}
	}
	t.Logf("controller killed with %d of %d BundleDeployments of the rollout written", done, n)

	// A new controller resumes.
	start()
	var final map[string]fleet.BundleDeployment
	g.Eventually(func(g Gomega) {
		final = allDeployed(g, name+"-moving")
		for c, bd := range final {
			g.Expect(bd.Spec.DeploymentID).To(Equal(wantID), c)
		}
	}, wait, tick).Should(Succeed())
	t.Logf("RECOVERY controller-killed(%s): kill -> new controller finished the rollout to %d clusters in %s", name, n, since(killed))

	// Nothing was rewritten without a change.
	for c, bd := range final {
		if before := atKill[c]; before.Spec.DeploymentID == wantID {
			g.Expect(bd.Generation).To(Equal(before.Generation), "%s: BundleDeployment already at v2 was rewritten", c)
		}
		g.Expect(bd.Generation).To(BeNumerically("<=", movingV1[c].Generation+2), "%s: spec written more often than staging+promotion", c)
	}
	g.Consistently(func(g Gomega) {
		for c, bd := range bundleDeployments(g, ws, name+"-steady") {
			g.Expect(bd.Generation).To(Equal(steady[c].Generation), "%s: unchanged BundleDeployment rewritten", c)
			g.Expect(bd.ResourceVersion).To(Equal(steady[c].ResourceVersion), "%s: unchanged BundleDeployment touched", c)
		}
	}, 3*time.Second, time.Second).Should(Succeed())
	// Each agent applied v1 of both bundles and v2 once: nothing twice.
	g.Eventually(sim.Stats.Applied.Load, wait, tick).Should(BeEquivalentTo(3 * n))
	g.Consistently(sim.Stats.Applied.Load, 3*time.Second, tick).Should(BeEquivalentTo(3 * n))
}

// runs counts the runs of each test name in this process.
var runs = map[string]int{}

// freshName is name on a test's first run in this process and name-N on
// its Nth, so that `go test -count N` starts each run in a workspace, with
// clusters and bundles, of its own on the package's shared API server.
func freshName(name string) string {
	runs[name]++
	if runs[name] == 1 {
		return name
	}
	return fmt.Sprintf("%s-%d", name, runs[name])
}

// logTail logs the last n lines of the file at path: what a controller
// process said before a failure.
func logTail(t *testing.T, path string, n int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	t.Logf("last %d lines of %s:\n%s", len(lines), filepath.Base(path), strings.Join(lines, "\n"))
}
