// Package harness is Fleet's scale benchmark: it boots a real upstream API
// server and etcd (and a downstream one for real apply), runs the manager
// and a process of simulated agents as child processes, drives a scenario
// (register N agents, roll out bundles, change one, stay idle) and measures
// what it costs, next to the raw floor of the same API server.
//
// Nothing is estimated: times come from watches of the objects a user would
// read, CPU and memory from /proc of the child processes, request counts
// from the API server's audit log and /metrics, and bytes from etcd itself.
package harness

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fleetgo/fleet/internal/agent/simulator"
)

// Scenario is one benchmark case.
type Scenario struct {
	Name string `json:"name"`
	// Clusters is the number of simulated agents.
	Clusters int `json:"clusters"`
	// Bundles, each targeting every cluster, with ResourcesPerBundle
	// ConfigMaps each.
	Bundles            int `json:"bundles"`
	ResourcesPerBundle int `json:"resourcesPerBundle"`
	// Mode is how the agents apply (status-only or real).
	Mode simulator.Mode `json:"mode"`
	// Change measures a change of the first bundle after the initial
	// rollout (bundle change -> all BundleDeployments Ready).
	Change bool `json:"change"`
	// Idle is how long to stay idle at the end, counting the agents' API
	// requests; zero skips the idle phase.
	Idle time.Duration `json:"idle"`
	// Floor measures the raw API server floor for Clusters watchers.
	Floor bool `json:"floor"`
	// RegisterConcurrency bounds how many agents register at the same time
	// (0: all at once, as in register-1k). At 10,000 clusters on 2 cores
	// an all-at-once burst only measures client time-outs and retries;
	// the scenario is about the rollout afterwards.
	RegisterConcurrency int `json:"registerConcurrency,omitempty"`
	// Shards is the number of manager shards (processes started with
	// --shard-id) that own the bundles, spread round-robin; 0 means the
	// unsharded manager does all the work.
	Shards int `json:"shards,omitempty"`
	// Schedule measures a Schedule's window flips after the creation
	// (schedule.go): the hold of every BundleDeployment as a window
	// closes, a bundle change made while it is closed, and the release as
	// the next window opens. The manager then runs with Schedules enabled
	// (EXPERIMENTAL_SCHEDULES); every other scenario runs without.
	Schedule bool `json:"schedule,omitempty"`
	// PhaseTimeout is how long a phase of this scenario may take before it
	// is given up (Options.PhaseTimeout overrides it; zero: 20 minutes).
	// 10k-10's creation of 100,000 BundleDeployments takes about 30 minutes
	// on a slow day of the 2-core machine, so it gets an hour.
	PhaseTimeout time.Duration `json:"phaseTimeout,omitempty"`
	// About says what the scenario stands for.
	About string `json:"about"`
}

// Scenarios are the named cases of `go run ./test/scale`.
var Scenarios = map[string]Scenario{
	"tiny": {Name: "tiny", Clusters: 20, Bundles: 2, ResourcesPerBundle: 3, Mode: simulator.RealApply,
		Change: true, Idle: 20 * time.Second, Floor: true,
		About: "smoke test of the harness: 20 clusters x 2 bundles, real apply"},
	"1k-1": {Name: "1k-1", Clusters: 1000, Bundles: 1, ResourcesPerBundle: 5, Mode: simulator.RealApply,
		Change: true, Floor: true,
		About: "1,000 clusters, 1 bundle, real apply; bundle change -> all Ready"},
	"50x50": {Name: "50x50", Clusters: 50, Bundles: 50, ResourcesPerBundle: 5, Mode: simulator.RealApply,
		Floor: true,
		About: "Fleet's QA case: 50 clusters x 50 bundles, real apply; creation -> all Ready"},
	"10k-10": {Name: "10k-10", Clusters: 10000, Bundles: 10, ResourcesPerBundle: 3, Mode: simulator.StatusOnly,
		Change: true, Floor: true, RegisterConcurrency: 1000, PhaseTimeout: time.Hour,
		About: "10,000 clusters x 10 bundles, status-only; one bundle change -> all Ready"},
	"idle": {Name: "idle", Clusters: 1000, Bundles: 1, ResourcesPerBundle: 5, Mode: simulator.StatusOnly,
		Idle:  10 * time.Minute,
		About: "1,000 registered clusters with one bundle, idle; API requests per agent per minute"},
	"shards-1": {Name: "shards-1", Clusters: 200, Bundles: 20, ResourcesPerBundle: 3, Mode: simulator.StatusOnly,
		Shards: 1,
		About:  "200 clusters x 20 bundles, status-only, the bundles owned by 1 manager shard (compare with shards-2)"},
	"shards-2": {Name: "shards-2", Clusters: 200, Bundles: 20, ResourcesPerBundle: 3, Mode: simulator.StatusOnly,
		Shards: 2,
		About:  "the same with the bundles split over 2 manager shards on the same machine"},
	"schedule-1k": {Name: "schedule-1k", Clusters: 1000, Bundles: 10, ResourcesPerBundle: 3, Mode: simulator.StatusOnly,
		Schedule: true,
		About:    "1,000 clusters x 10 bundles, status-only, one Schedule over all: window close -> all held, change while closed, window open -> all Ready"},
	"register-1k": {Name: "register-1k", Clusters: 1000, Mode: simulator.StatusOnly,
		About: "1,000 agents registering at once"},
}

// Lookup returns a named scenario.
func Lookup(name string) (Scenario, error) {
	s, ok := Scenarios[name]
	if !ok {
		return s, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Names lists the scenarios, sorted.
func Names() []string {
	var out []string
	for n := range Scenarios {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
