// Command scale is Fleet's scale benchmark (`make bench`): it runs named
// scenarios against a real API server and etcd, with the manager and a
// process of simulated agents, and prints a table and JSON of what it
// measured. See docs/scale.md.
//
//	go run ./test/scale [flags] SCENARIO...
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fleetgo/fleet/internal/agent/simulator"
	"github.com/fleetgo/fleet/test/scale/harness"
)

func main() {
	harness.MaybeChild()
	var (
		out         = flag.String("out", "", "each scenario writes result.json, its logs and its profiles into <out>/<scenario>/ (default: a new temporary directory per scenario, outDir in the JSON)")
		idle        = flag.Duration("idle", 0, "override the idle window (the idle scenario's default is 10m)")
		mode        = flag.String("simulate-apply", "", "override the apply mode: status-only or real")
		timeout     = flag.Duration("phase-timeout", 0, "give up a phase after this long (default: the scenario's, 1h for 10k-10, else 20m)")
		qps         = flag.Float64("manager-qps", 0, "override the manager's client QPS (default: as cmd/fleet-controller)")
		maxInFlight = flag.Int("manager-max-in-flight", 0, "override the manager's --max-requests-in-flight (default: as cmd/fleet-controller)")
		checkin     = flag.Duration("checkin-interval", 15*time.Minute, "agent check-in interval")
		profile     = flag.Int("profile-seconds", 30, "length of the CPU profiles of the manager, the agents and both API servers during the measured rollout; -1 disables")
		floorRounds = flag.Int("floor-rounds", 3, "measure each raw floor this many times; the ratio uses the median round trip")
		jsonOnly    = flag.Bool("json", false, "print only JSON")
		real        = flag.Bool("real-agent", false, "also run one real fleet-agent process and report its memory")
		viaAgent    = flag.Bool("fleet-agent-simulators", false, "run the agents as `fleet-agent --simulators N` instead of a harness child")
		clusters    = flag.Int("clusters", 0, "override the scenario's number of clusters (e.g. a 200-cluster 1k-1 while iterating)")
		bundles     = flag.Int("bundles", -1, "override the scenario's number of bundles")
		perBndl     = flag.Int("resources", 0, "override the scenario's resources per bundle")
		regConc     = flag.Int("register-concurrency", -1, "override how many agents register at once (0: all)")
		rest        = flag.Duration("rest", 150*time.Second, "after the last phase, leave the agents alone this long before reading their resident set for the per-cluster footprint (an idle Go process returns a burst's pages after its 2-minute forced GC); 0 reads it at once")
		memLimit    = flag.Int64("manager-memory-limit", 1<<30, "container memory limit (bytes) the manager runs as if under, as the fleet chart sets it; it gets 90% as its Go soft limit. 0: none")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./test/scale [flags] SCENARIO...\nscenarios: %s\n", strings.Join(harness.Names(), ", "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var m simulator.Mode
	if *mode != "" {
		var err error
		if m, err = simulator.ParseMode(*mode); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed := false
	for _, name := range flag.Args() {
		sc, err := harness.Lookup(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if *clusters > 0 {
			sc.Clusters = *clusters
		}
		if *bundles >= 0 {
			sc.Bundles = *bundles
		}
		if *perBndl > 0 {
			sc.ResourcesPerBundle = *perBndl
		}
		if *regConc >= 0 {
			sc.RegisterConcurrency = *regConc
		}
		o := harness.Options{Idle: *idle, Mode: m, PhaseTimeout: *timeout, ManagerQPS: float32(*qps), ManagerMaxInFlight: *maxInFlight, ManagerMemoryLimit: *memLimit,
			CheckinInterval: *checkin, ProfileSeconds: *profile, FloorRounds: *floorRounds, RealAgent: *real, SimulatorsBinary: *viaAgent, Rest: *rest, Log: os.Stderr}
		if *out != "" {
			o.OutDir = filepath.Join(*out, name)
		}
		res, err := harness.Run(ctx, sc, o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			failed = true
		}
		if res == nil {
			continue
		}
		raw, _ := json.MarshalIndent(res, "", "  ")
		_ = os.WriteFile(filepath.Join(res.OutDir, "result.json"), raw, 0o644)
		if !*jsonOnly {
			fmt.Println()
			res.PrintTable(os.Stdout)
			fmt.Println()
		}
		fmt.Println(string(raw))
		if len(res.Problems) > 0 {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
