package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/agent/simulator"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/kubeclient"
	"github.com/fleetgo/fleet/internal/scheme"
	"github.com/fleetgo/fleet/internal/testenv"
)

// Options tune a run; zero values are the defaults.
type Options struct {
	// OutDir receives logs, profiles and result.json (default: a new
	// temporary directory).
	OutDir string
	// Idle overrides the scenario's idle window (> 0).
	Idle time.Duration
	// Mode overrides the scenario's apply mode.
	Mode simulator.Mode
	// PhaseTimeout bounds each phase (default: the scenario's, else 20m).
	PhaseTimeout time.Duration
	// ManagerQPS overrides the manager's client QPS (default: what
	// cmd/fleet-controller uses).
	ManagerQPS float32
	// ManagerMaxInFlight overrides the manager's limit of requests in
	// flight (manager.Options.MaxInFlight).
	ManagerMaxInFlight int
	// ManagerMemoryLimit is the container memory limit the manager runs
	// as if under (bytes; 0: none). In a container, fleet-controller gives
	// the Go runtime 90 % of its limit (internal/memlimit); the child
	// process has no cgroup limit, so it gets the same soft limit set
	// explicitly. The chart's limit is 1 GiB.
	ManagerMemoryLimit int64
	// CheckinInterval of the agents (default 15m, Fleet's default).
	CheckinInterval time.Duration
	// ProfileSeconds is the length of the CPU profiles of the manager,
	// the agents and both API servers taken at the start of the measured
	// rollout (default 30; negative disables).
	ProfileSeconds int
	// FloorRounds is how many times each raw floor is measured (default
	// 1); the floor's figures are the medians. The floor of one run varied
	// by 2× between runs minutes apart on the 2-core test machine.
	FloorRounds int
	// Rest is how long the harness leaves the agents alone after the last
	// phase before it reads their resident set for the per-cluster
	// footprint (0: read it at once). A Go process keeps the pages of a
	// burst (2,500 concurrent Helm installs at 50x50) until its next
	// garbage collection, which an idle process runs every 2 minutes, and
	// the runtime then returns them; the footprint is what stays. The
	// peak and the RSS right after the last phase are reported as well.
	// Scenarios with an idle window skip it.
	Rest time.Duration
	// RealAgent also runs one real fleet-agent process (built from
	// cmd/fleet-agent) and reports its resident memory at the end.
	RealAgent bool
	// SimulatorsBinary runs the agents as `fleet-agent --simulators N`
	// (built from cmd/fleet-agent) instead of a harness child; the
	// bootstrap Secret is then read from the downstream cluster.
	SimulatorsBinary bool
	// Log receives progress lines (default: discard).
	Log io.Writer
}

const (
	workspace   = fleet.DefaultWorkspace
	bundlePfx   = "scale-"
	targetLabel = "simulator"
)

// Run runs one scenario end to end and returns what it measured. An error
// means the environment could not be set up; a phase that did not complete
// is reported in the result (Complete=false, Problems).
func Run(ctx context.Context, sc Scenario, o Options) (*Result, error) {
	if o.Idle > 0 {
		sc.Idle = o.Idle
	}
	if o.Mode != "" && o.Mode != sc.Mode {
		// About describes the scenario as defined; say how it ran.
		sc.About += fmt.Sprintf(" (run with -simulate-apply=%s)", o.Mode)
		sc.Mode = o.Mode
	}
	if o.PhaseTimeout <= 0 {
		o.PhaseTimeout = sc.PhaseTimeout
	}
	if o.PhaseTimeout <= 0 {
		o.PhaseTimeout = 20 * time.Minute
	}
	if o.CheckinInterval <= 0 {
		o.CheckinInterval = 15 * time.Minute
	}
	if o.ProfileSeconds == 0 {
		o.ProfileSeconds = 30
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	logf := func(format string, args ...any) {
		_, _ = fmt.Fprintf(o.Log, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	if o.OutDir == "" {
		d, err := os.MkdirTemp("", "fleet-scale-"+sc.Name+"-")
		if err != nil {
			return nil, err
		}
		o.OutDir = d
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Scenario: sc, Machine: machine(), OutDir: o.OutDir, ManagerCPUByPhase: map[string]float64{}}

	// Upstream API server + etcd, auditing ServiceAccount requests.
	policy := filepath.Join(o.OutDir, "audit-policy.yaml")
	auditLog := filepath.Join(o.OutDir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	logf("starting upstream API server and etcd")
	upLog, err := os.Create(filepath.Join(o.OutDir, "apiserver.log"))
	if err != nil {
		return nil, err
	}
	defer upLog.Close()
	up, err := testenv.Start(testenv.Options{Name: "scale-upstream", APIServerLog: upLog, ExtraAPIServerArgs: map[string]string{
		"audit-policy-file": policy, "audit-log-path": auditLog, "audit-log-maxsize": "0",
	}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = up.Stop() }()
	var down *testenv.Cluster
	if sc.Mode == simulator.RealApply || o.RealAgent || o.SimulatorsBinary {
		logf("starting downstream API server")
		// The one downstream API server stands for every simulated
		// cluster's own. With its default concurrency (600 seats, shared
		// by priority levels) API priority and fairness queued and then
		// refused (429, retried after 1 s) hundreds of the 1,000 agents'
		// Helm requests, which a cluster's API server serving one agent
		// never does; it gets the seats of several servers instead.
		if down, err = testenv.Start(testenv.Options{Name: "scale-downstream", WithoutCRDs: true, ExtraAPIServerArgs: map[string]string{
			"max-requests-inflight": "3000", "max-mutating-requests-inflight": "1500",
		}}); err != nil {
			return nil, err
		}
		defer func() { _ = down.Stop() }()
	}
	for _, ns := range []string{fleet.DefaultSystemNamespace, fleet.DefaultSystemRegistrationNamespace, workspace} {
		if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}

	logf("starting the manager")
	mgr, err := startChild("manager", o.OutDir, childConfig{Kubeconfig: up.Kubeconfig, ManagerQPS: o.ManagerQPS, MaxInFlight: o.ManagerMaxInFlight, MemoryLimit: o.ManagerMemoryLimit, CheckinInterval: o.CheckinInterval,
		Schedules: sc.Schedule})
	if err != nil {
		return nil, err
	}
	defer mgr.stop()
	shards, err := startShards(sc, o.OutDir, childConfig{Kubeconfig: up.Kubeconfig, ManagerQPS: o.ManagerQPS, MaxInFlight: o.ManagerMaxInFlight, MemoryLimit: o.ManagerMemoryLimit, CheckinInterval: o.CheckinInterval})
	if err != nil {
		return nil, err
	}
	defer stopAll(shards)
	var agents *child
	procs := func() map[string]float64 {
		m := map[string]float64{"manager": CPUSeconds(mgr.pid()), "apiserver": CPUSeconds(up.APIServerPID()),
			"etcd": CPUSeconds(up.EtcdPID()), "harness": CPUSeconds(os.Getpid())}
		if agents != nil {
			m["agents"] = CPUSeconds(agents.pid())
		}
		if down != nil {
			m["downstream"] = CPUSeconds(down.APIServerPID()) + CPUSeconds(down.EtcdPID())
		}
		return m
	}
	cpuMark := procs()
	res.CPUByPhase = map[string]map[string]float64{}
	res.WatchersClosedByPhase = map[string]map[string]int{}
	closedMark, _ := closedWatchers(ctx, up.Clientset)
	var downMix map[string]float64
	if down != nil {
		downMix, _ = requestMix(ctx, down.Clientset)
		res.DownstreamRequestsByPhase = map[string]map[string]int{}
	}
	markPhase := func(name string) {
		if down != nil {
			if mix, err := requestMix(ctx, down.Clientset); err == nil && downMix != nil {
				res.DownstreamRequestsByPhase[name] = mixDelta(downMix, mix)
				downMix = mix
			}
		}
		if closed, err := closedWatchers(ctx, up.Clientset); err == nil && closedMark != nil {
			if d := mixDelta(closedMark, closed); len(d) > 0 {
				res.WatchersClosedByPhase[name] = d
			}
			closedMark = closed
		}
		now := procs()
		res.ManagerCPUByPhase[name] = now["manager"] - cpuMark["manager"]
		res.CPUByPhase[name] = map[string]float64{}
		for k, v := range now {
			res.CPUByPhase[name][k] = v - cpuMark[k]
		}
		cpuMark = now
	}

	boot, err := bootstrapFrom(ctx, up.Client, o.PhaseTimeout)
	if err != nil {
		return res, fmt.Errorf("registration token: %w", err)
	}
	markPhase("startup")

	// Watch what a user would watch: BundleDeployments and Clusters, on a
	// connection of its own (kubeclient.OwnConnection), as a user's would be.
	admin := rest.CopyConfig(up.Config)
	admin.QPS = -1
	rc, err := fleetClient(kubeclient.OwnConnection(admin))
	if err != nil {
		return nil, err
	}
	tr := newTracker()
	// phaseRequests counts the requests of a measured phase from the audit
	// log, once it has been flushed.
	phaseRequests := func(from, to time.Time) (*Requests, error) {
		time.Sleep(2 * time.Second) // let the audit log flush
		r, err := countAgentRequests(auditLog, workspace, tr.realAgentNamespace(), from, to, sc.Clusters)
		if err != nil {
			return nil, err
		}
		return &r, nil
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchAll(wctx, rc, "bundledeployments", func() runtime.Object { return &fleet.BundleDeploymentList{} }, tr.onBD)
	go watchAll(wctx, rc, "clusters", func() runtime.Object { return &fleet.ClusterList{} }, tr.onCluster)

	logf("starting %d simulated agents (%s)", sc.Clusters, sc.Mode)
	if o.SimulatorsBinary {
		// Build before the clock starts.
		if _, err := buildAgent(ctx, o.OutDir); err != nil {
			return res, err
		}
	}
	agentsCfg := childConfig{Count: sc.Clusters, Mode: sc.Mode, Bootstrap: boot, CheckinInterval: o.CheckinInterval,
		ClientIDPrefix: "scale-" + sc.Name, RegisterConcurrency: sc.RegisterConcurrency}
	if down != nil {
		if agentsCfg.Kubeconfig, err = agentKubeconfig(ctx, down, o.OutDir); err != nil {
			return res, fmt.Errorf("downstream credential: %w", err)
		}
	}
	reg := tr.startClusterPhase(sc.Clusters)
	if o.SimulatorsBinary {
		agents, err = startSimulatorsBinary(ctx, o.OutDir, down, agentsCfg.Kubeconfig, boot, sc, o.CheckinInterval)
	} else {
		agents, err = startChild("agents", o.OutDir, agentsCfg)
	}
	if err != nil {
		return res, err
	}
	defer agents.stop()
	ok := wait(ctx, reg.complete, o.PhaseTimeout, mgr, agents)
	regDone, _ := tr.snapshot(reg)
	res.Registration = timingOf(regDone, sc.Clusters, ok)
	markPhase("register")
	logf("registration: %d of %d checked in, total %.1fs", res.Registration.Count, sc.Clusters, res.Registration.TotalSeconds)
	if !ok {
		res.problem("only %d of %d agents registered and checked in within %s (see %s)", res.Registration.Count, sc.Clusters, o.PhaseTimeout, o.OutDir)
	}
	if ok {
		// A first check-in can bring about more writes of its Cluster (its
		// Ready condition): give them a moment before counting.
		time.Sleep(2 * time.Second)
		res.RegistrationRequests, _ = phaseRequests(reg.start, time.Now()) // an extra figure; the run stands without it
	}

	var real *realAgent
	if o.RealAgent {
		logf("starting a real fleet-agent")
		if real, err = startRealAgent(ctx, o.OutDir, down, boot, o.CheckinInterval); err != nil {
			res.problem("real agent: %v", err)
		} else {
			defer real.stop()
		}
	}

	if sc.Floor {
		measureFloors(ctx, up.Config, sc, max(1, o.FloorRounds), res, logf)
		markPhase("floor")
	}

	prof := &profiler{seconds: o.ProfileSeconds, dir: o.OutDir, log: o.Log,
		children:   map[string]*child{"manager": mgr, "agents": agents},
		apiServers: map[string]*testenv.Cluster{"apiserver": up, "downstream-apiserver": down}}

	if sc.Bundles > 0 {
		logf("creating %d bundles x %d resources", sc.Bundles, sc.ResourcesPerBundle)
		if !sc.Change && !sc.Schedule { // those profile their own phases
			prof.during(ctx, "create", res)
		}
		p := tr.startBDPhase(sc.Clusters*sc.Bundles, false, nil)
		// Written as fleet apply and a GitRepo write a repository's
		// bundles: apply.DefaultParallel at a time.
		if err := parallel(ctx, sc.Bundles, apply.DefaultParallel, func(i int) error {
			b := bundle(i, sc.ResourcesPerBundle, 0)
			labelShard(sc, i, b)
			return up.Client.Create(ctx, b)
		}); err != nil {
			return res, fmt.Errorf("creating bundle: %w", err)
		}
		ok := wait(ctx, p.complete, o.PhaseTimeout, mgr, agents)
		if len(shards) > 0 {
			res.ManagerCPUByPhase["shards-create"] = shardCPUSeconds(shards)
		}
		createEnd := time.Now()
		ready, written := tr.snapshot(p)
		res.Create, res.CreateWritten = timingOf(ready, p.want, ok), timingOf(written, p.want, len(written) >= p.want)
		markPhase("create")
		total, readyNow := tr.counts()
		logf("create: %d of %d Ready (%d BundleDeployments exist), total %.1fs", res.Create.Count, p.want, total, res.Create.TotalSeconds)
		if !ok {
			res.problem("after %s only %d of %d BundleDeployments were Ready (%d exist, %d Ready overall)", o.PhaseTimeout, res.Create.Count, p.want, total, readyNow)
		}
		if !sc.Change {
			res.CreateRequests, _ = phaseRequests(p.start, createEnd) // an extra figure; the run stands without it
		}
		if sc.Change && ok {
			logf("waiting for the manager to roll the creation up")
			waited, err := settle(ctx, up.Client, sc.Clusters, sc.Bundles, o.PhaseTimeout)
			res.SettleSeconds = waited.Seconds()
			if err != nil {
				res.problem("the creation was not rolled up after %s (%v); the change shares the API server with it", waited.Round(time.Second), err)
			}
			markPhase("settle")
			logf("changing bundle %s0", bundlePfx)
			prof.during(ctx, "change", res)
			name := bundlePfx + "0"
			p := tr.startBDPhase(sc.Clusters, true, func(_ string, obj runtime.Object) bool {
				bd, _ := obj.(*fleet.BundleDeployment)
				return bd != nil && bd.Labels[fleet.BundleLabel] == name
			})
			if err := changeBundle(ctx, up.Client, name, sc.ResourcesPerBundle); err != nil {
				return res, err
			}
			ok := wait(ctx, p.complete, o.PhaseTimeout, mgr, agents)
			end := time.Now()
			ready, written := tr.snapshot(p)
			res.Change, res.ChangeWritten = timingOf(ready, p.want, ok), timingOf(written, p.want, len(written) >= p.want)
			markPhase("change")
			logf("change: %d of %d Ready, total %.1fs", res.Change.Count, p.want, res.Change.TotalSeconds)
			if !ok {
				res.problem("after %s only %d of %d BundleDeployments were Ready with the change", o.PhaseTimeout, res.Change.Count, p.want)
			}
			res.ChangeRequests, _ = phaseRequests(p.start, end) // likewise
		}
		if sc.Schedule && ok {
			sr := &scheduleRun{c: up.Client, tr: tr, sc: sc, timeout: o.PhaseTimeout, res: res, mark: markPhase,
				requests: phaseRequests, logf: logf, prof: prof, children: []*child{mgr, agents}}
			if err := sr.run(ctx); err != nil {
				return res, err
			}
		}
		res.BundleDeployments, _ = tr.counts()
	}
	res.RatioToFloor = ratio(res, sc, res.Floor)
	res.RatioToFloorCR = ratio(res, sc, res.FloorCR)

	if sc.Idle > 0 {
		logf("idle for %s", sc.Idle)
		cs := up.Clientset
		before, beforeMut, _ := apiRequestTotal(ctx, cs)
		from := time.Now()
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(sc.Idle):
		}
		to := time.Now()
		after, afterMut, err := apiRequestTotal(ctx, cs)
		if err == nil {
			mins := to.Sub(from).Minutes()
			res.IdleAPIRequestsAll, res.IdleMutatingAllPerM = (after-before)/mins, (afterMut-beforeMut)/mins
		}
		markPhase("idle")
		if res.Idle, err = phaseRequests(from, to); err != nil {
			res.problem("audit log: %v", err)
		}
	}

	if e, err := measureEtcd(ctx, up.Env().ControlPlane.Etcd.URL.String()); err != nil {
		res.problem("etcd: %v", err)
	} else {
		res.Etcd = &e
	}
	prof.wait()
	heap := filepath.Join(o.OutDir, "manager-heap.pprof")
	if err := mgr.profile(ctx, "heap", heap); err == nil {
		res.Profiles = append(res.Profiles, heap)
	}
	aheap := filepath.Join(o.OutDir, "agents-heap.pprof")
	if err := agents.profile(ctx, "heap", aheap); err == nil {
		res.Profiles = append(res.Profiles, aheap)
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	res.ManagerMemoryLimitMiB = mib(o.ManagerMemoryLimit)
	res.Manager = Process{CPUSeconds: CPUSeconds(mgr.pid()), PeakRSSMiB: mib(peakRSSBytes(mgr.pid())),
		RSSMiB: mib(rssBytes(mgr.pid())), BaseRSSMiB: mib(mgr.baseRSS)}
	arss := rssBytes(agents.pid())
	res.Agents = Process{CPUSeconds: CPUSeconds(agents.pid()), PeakRSSMiB: mib(peakRSSBytes(agents.pid())),
		RSSMiB: mib(arss), BaseRSSMiB: mib(agents.baseRSS)}
	if o.Rest > 0 && sc.Idle == 0 { // an idle window is rest already
		logf("leaving the agents alone for %s before reading their footprint", o.Rest)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(o.Rest):
		}
		arss = rssBytes(agents.pid())
		res.Agents.RestRSSMiB, res.Agents.RestSeconds = mib(arss), o.Rest.Seconds()
		// What the agents still hold at rest (the profile above is of
		// the last collection during the burst): collected first, after
		// the RSS was read, so that it shows only what is still live.
		rheap := filepath.Join(o.OutDir, "agents-heap-rest.pprof")
		if err := agents.profile(ctx, "heap?gc=1", rheap); err == nil {
			res.Profiles = append(res.Profiles, rheap)
		}
	}
	anon := anonBytes(agents.pid())
	res.Agents.AnonMiB, res.Agents.BaseAnonMiB = mib(anon), mib(agents.baseAnon)
	if sc.Clusters > 0 {
		res.Agents.PerClusterKiB = float64(arss-agents.baseRSS) / 1024 / float64(sc.Clusters)
		if anon > 0 && agents.baseAnon > 0 {
			res.Agents.PerClusterAnonKiB = float64(anon-agents.baseAnon) / 1024 / float64(sc.Clusters)
		}
	}
	if real != nil {
		select {
		case err := <-real.exited:
			res.problem("the real fleet-agent exited: %v (see %s/real-agent.log)", err, o.OutDir)
		default:
			pid := real.cmd.Process.Pid
			res.RealAgent = &Process{CPUSeconds: CPUSeconds(pid), PeakRSSMiB: mib(peakRSSBytes(pid)), RSSMiB: mib(rssBytes(pid))}
			if n := tr.checkedIn(); n != sc.Clusters+1 {
				res.problem("the real fleet-agent did not check in (%d of %d clusters checked in)", n, sc.Clusters+1)
			}
		}
	}
	for _, c := range []*child{mgr, agents} {
		if err := c.alive(); err != nil {
			res.problem("%v", err)
		}
	}
	return res, nil
}

// wait waits for done, the timeout, or a child's death.
func wait(ctx context.Context, done <-chan struct{}, timeout time.Duration, children ...*child) bool {
	deadline := time.After(timeout)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return true
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-tick.C:
			for _, c := range children {
				if c.alive() != nil {
					return false
				}
			}
		}
	}
}

// bootstrapFrom creates a ClusterRegistrationToken and turns the values
// the manager hands out for it into the agents' bootstrap data.
func bootstrapFrom(ctx context.Context, c client.Client, timeout time.Duration) (*register.Bootstrap, error) {
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: workspace}}
	if err := c.Create(ctx, tok); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := c.Get(ctx, client.ObjectKeyFromObject(tok), tok)
		if err == nil && tok.Status.SecretName != "" {
			s := &corev1.Secret{}
			if err = c.Get(ctx, client.ObjectKey{Namespace: workspace, Name: tok.Status.SecretName}, s); err == nil {
				var v struct {
					APIServerURL, APIServerCA, ClusterNamespace, SystemRegistrationNamespace, Token, TokenName string
				}
				if err := yaml.Unmarshal(s.Data["values"], &v); err != nil {
					return nil, err
				}
				return register.ParseBootstrap(map[string][]byte{"apiServerURL": []byte(v.APIServerURL),
					"apiServerCA": []byte(v.APIServerCA), "token": []byte(v.Token), "tokenName": []byte(v.TokenName),
					"clusterNamespace": []byte(v.ClusterNamespace), "systemRegistrationNamespace": []byte(v.SystemRegistrationNamespace)})
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the manager did not hand out values for the registration token (is the registration component running?)")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// bundle i has n ConfigMaps and targets every simulated cluster.
func bundle(i, n, rev int) *fleet.Bundle {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", bundlePfx, i), Namespace: workspace}}
	b.Spec.Resources = resources(i, n, rev)
	b.Spec.Targets = []fleet.BundleTarget{{Name: "all", ClusterSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{targetLabel: "true"}}}}
	return b
}

func resources(i, n, rev int) []fleet.BundleResource {
	var out []fleet.BundleResource
	pad := strings.Repeat("p", 128)
	for j := range n {
		out = append(out, fleet.BundleResource{Name: fmt.Sprintf("cm-%d.yaml", j), Content: fmt.Sprintf(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: scale-%d-%d\ndata:\n  revision: %q\n  padding: %s\n", i, j, fmt.Sprint(rev), pad)})
	}
	return out
}

// changeBundle changes one value in every resource of the bundle.
func changeBundle(ctx context.Context, c client.Client, name string, n int) error {
	for attempt := 0; ; attempt++ {
		b := &fleet.Bundle{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: workspace, Name: name}, b); err != nil {
			return err
		}
		var i int
		_, _ = fmt.Sscanf(strings.TrimPrefix(name, bundlePfx), "%d", &i)
		b.Spec.Resources = resources(i, n, 1)
		err := c.Update(ctx, b)
		if err == nil || !apierrors.IsConflict(err) || attempt > 10 {
			return err
		}
	}
}

// fleetClient is a REST client of the fleet API group.
func fleetClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &fleet.GroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	return rest.RESTClientFor(c)
}

// ratio is the rollout total (change, else creation) over the round trip
// of the floor of the same shape (one object per cluster for a change, one
// per cluster and bundle for a creation); 0 when either is missing.
func ratio(res *Result, sc Scenario, f *Floor) float64 {
	if f == nil || f.RoundTripSeconds <= 0 {
		return 0
	}
	switch {
	case res.Change.Complete && f.PerWatcher <= 1:
		return res.Change.TotalSeconds / f.RoundTripSeconds
	case !sc.Change && res.Create.Complete && max(1, f.PerWatcher) == max(1, sc.Bundles):
		return res.Create.TotalSeconds / f.RoundTripSeconds
	}
	return 0
}
