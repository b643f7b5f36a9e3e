package metrics

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/summary"
)

// Source is one manager's view: the informer-backed reader it lists from
// and which families it is responsible for, so that replicas and shards
// never report the same object twice.
type Source struct {
	// Reader is the manager's cache (mgr.GetCache()); listing it makes no
	// API call once the informers are synced.
	Reader client.Reader
	// ShardID: only GitRepos, HelmOps, Bundles and BundleDeployments whose
	// fleet.cattle.io/shard-ref equals it are reported ("" = unlabelled).
	ShardID string
	// HelmOps reports the HelmOp families. A manager whose HelmOp
	// controller is off (fleet-controller --helmops=false) leaves it
	// false: listing them from its cache would start a cluster-wide
	// HelmOp informer for the metrics alone. On CRDs older than HelmOps
	// the families stay empty until the CRD is served and the controller
	// starts (internal/manager).
	HelmOps bool
	// Clusters reports the Cluster and ClusterGroup families (the unsharded
	// replica only: every shard sees every Cluster).
	Clusters bool
	// Agent marks an agent's upstream cache (its cluster namespace only):
	// it reports fleet_agent_bundledeployments per state and nothing else.
	Agent bool
	// Namespace is the agent's cluster namespace (the cluster_namespace
	// label, also when it has no deployments).
	Namespace string
	// ListTimeout bounds one scrape's cache reads (default 10s).
	ListTimeout time.Duration
}

// collector is the process-wide collector on controller-runtime's registry;
// managers add and remove their Source as they start and stop. A process
// can run several managers (tests, or a dev environment): series that more
// than one source would report are emitted once.
type collector struct {
	mu      sync.Mutex
	nextID  int
	sources map[int]Source
}

var (
	global       = &collector{sources: map[int]Source{}}
	registerOnce sync.Once
)

func register() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(global)
	})
}

// Run reports src's objects until ctx ends. It blocks; run it as a
// leader-elected runnable so that only the active replica reports.
func Run(ctx context.Context, src Source) error {
	remove := Add(src)
	defer remove()
	<-ctx.Done()
	return nil
}

// Add registers src and returns a function that removes it.
func Add(src Source) func() {
	register()
	if src.ListTimeout <= 0 {
		src.ListTimeout = 10 * time.Second
	}
	global.mu.Lock()
	id := global.nextID
	global.nextID++
	global.sources[id] = src
	global.mu.Unlock()
	return func() {
		global.mu.Lock()
		delete(global.sources, id)
		global.mu.Unlock()
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs() {
		ch <- d
	}
	git.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	srcs := make([]Source, 0, len(c.sources))
	for _, s := range c.sources {
		srcs = append(srcs, s)
	}
	c.mu.Unlock()
	seen := map[string]bool{}
	emit := func(d *prometheus.Desc, v float64, lv ...string) {
		key := d.String() + "\x00" + strings.Join(lv, "\x00")
		if seen[key] {
			return
		}
		seen[key] = true
		if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, lv...); err == nil {
			ch <- m
		}
	}
	repos := map[string]bool{}
	complete := len(srcs) > 0
	for _, s := range srcs {
		if !collectSource(s, emit, repos) {
			complete = false
		}
	}
	if complete {
		// Only a full view of every GitRepo may drop a repo's counters.
		git.prune(repos)
	}
	git.Collect(ch)
}

// collectSource lists s's objects from its cache and emits their samples;
// it records every GitRepo it saw in repos and reports whether the GitRepo
// list succeeded.
func collectSource(s Source, emit emitFunc, repos map[string]bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.ListTimeout)
	defer cancel()
	if s.Agent {
		return collectAgent(ctx, s, emit)
	}
	mine := func(o client.Object) bool { return o.GetLabels()[fleet.ShardLabel] == s.ShardID }

	gitrepos := &fleet.GitRepoList{}
	listed := s.Reader.List(ctx, gitrepos) == nil
	if listed {
		for i := range gitrepos.Items {
			r := &gitrepos.Items[i]
			if mine(r) {
				repos[r.Namespace+"/"+r.Name] = true
				gitRepoSamples(r, emit)
			}
		}
	}
	if s.HelmOps {
		helmOps := &fleet.HelmOpList{}
		if err := s.Reader.List(ctx, helmOps); err == nil {
			for i := range helmOps.Items {
				if mine(&helmOps.Items[i]) {
					helmOpSamples(&helmOps.Items[i], emit)
				}
			}
		}
	}
	bundles := &fleet.BundleList{}
	if err := s.Reader.List(ctx, bundles); err == nil {
		for i := range bundles.Items {
			if mine(&bundles.Items[i]) {
				bundleSamples(&bundles.Items[i], emit)
			}
		}
	}
	// Every manager watches every Cluster (targeting needs them), so
	// listing them costs no informer of its own.
	clusters := &fleet.ClusterList{}
	var live liveness
	if err := s.Reader.List(ctx, clusters); err == nil {
		offline := make(map[string]bool, len(clusters.Items))
		for i := range clusters.Items {
			c := &clusters.Items[i]
			offline[c.Namespace+"/"+c.Name] = meta.IsStatusConditionTrue(c.Status.Conditions, fleet.ConditionOffline)
		}
		live = func(key string) (bool, bool) { o, ok := offline[key]; return o, ok }
	} else {
		clusters = nil
	}
	bds := &fleet.BundleDeploymentList{}
	if err := s.Reader.List(ctx, bds); err == nil {
		for i := range bds.Items {
			if mine(&bds.Items[i]) {
				bundleDeploymentSamples(&bds.Items[i], live, emit)
			}
		}
	}
	if !s.Clusters {
		return listed
	}
	if clusters != nil {
		for i := range clusters.Items {
			clusterSamples(&clusters.Items[i], emit)
		}
	}
	groups := &fleet.ClusterGroupList{}
	if err := s.Reader.List(ctx, groups); err == nil {
		for i := range groups.Items {
			clusterGroupSamples(&groups.Items[i], emit)
		}
	}
	return listed
}

// collectAgent counts the agent's BundleDeployments per state; every state
// is reported (0 included) so that alerts need no absent().
func collectAgent(ctx context.Context, s Source, emit emitFunc) bool {
	bds := &fleet.BundleDeploymentList{}
	if err := s.Reader.List(ctx, bds); err != nil {
		return false
	}
	counts := map[fleet.BundleState]int{}
	ns := s.Namespace
	for i := range bds.Items {
		// The agent reporting is checking in: an Offline mark on its
		// deployments is the manager's, from before it came back.
		counts[summary.ReportedState(&bds.Items[i])]++
		ns = bds.Items[i].Namespace
	}
	for _, st := range append([]fleet.BundleState{fleet.Ready}, summary.States...) {
		emit(agentBundleDeployments, float64(counts[st]), ns, string(st))
	}
	return true
}
