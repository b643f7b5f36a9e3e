// Command fleet-agent runs in each managed cluster: it registers the cluster
// with the Fleet manager and deploys the cluster's BundleDeployments.
//
// In a cluster (no $KUBECONFIG) it uses the in-cluster config; with
// --kubeconfig or $KUBECONFIG it runs outside the cluster against that
// cluster (same code path; for tests and development).
package main

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/logging"
	"github.com/fleetgo/fleet/internal/memlimit"
	"github.com/fleetgo/fleet/internal/version"
)

func main() {
	var opts agent.Options
	// Flags take their defaults from the environment before the logger
	// exists: what could not be used is logged once it does.
	var ignored []ignoredEnv
	fs := pflag.NewFlagSet("fleet-agent", pflag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster the agent manages (empty: $KUBECONFIG, else the in-cluster config, else ~/.kube/config)")
	fs.StringVar(&opts.Namespace, "namespace", envOr("NAMESPACE", "cattle-fleet-system"), "agent namespace (env NAMESPACE)")
	fs.DurationVar(&opts.CheckinInterval, "checkin-interval", envDuration("CHECKIN_INTERVAL", register.DefaultCheckinInterval, &ignored), "how often the agent reports in (env CHECKIN_INTERVAL)")
	fs.IntVar(&opts.Workers, "workers", envInt("BUNDLEDEPLOYMENT_RECONCILER_WORKERS", register.DefaultWorkers, &ignored), "concurrent BundleDeployment reconciles (env BUNDLEDEPLOYMENT_RECONCILER_WORKERS)")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", envOr("FLEET_AGENT_METRICS_BIND_ADDRESS", "0"), "metrics address; 0 disables (env FLEET_AGENT_METRICS_BIND_ADDRESS)")
	var sims simulatorFlags
	fs.IntVar(&sims.count, "simulators", 0, "run this many simulated agents in this process instead of one agent (scale testing)")
	fs.StringVar(&sims.apply, "simulate-apply", "status-only", "with --simulators: status-only (report Ready, touch no downstream cluster) or real (deploy into namespace sim<index in 5 digits>, e.g. sim00003)")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "compete for Lease fleet-agent in the agent namespace so that one replica acts")
	fs.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", envDuration("CATTLE_ELECTION_LEASE_DURATION", register.DefaultLeaseDuration, &ignored), "lease duration (env CATTLE_ELECTION_LEASE_DURATION)")
	fs.DurationVar(&opts.RenewDeadline, "leader-election-renew-deadline", envDuration("CATTLE_ELECTION_RENEW_DEADLINE", register.DefaultRenewDeadline, &ignored), "lease renew deadline (env CATTLE_ELECTION_RENEW_DEADLINE)")
	fs.DurationVar(&opts.RetryPeriod, "leader-election-retry-period", envDuration("CATTLE_ELECTION_RETRY_PERIOD", register.DefaultRetryPeriod, &ignored), "lease retry period (env CATTLE_ELECTION_RETRY_PERIOD)")
	pprofAddr := fs.String("pprof-bind-address", os.Getenv("FLEET_AGENT_PPROF_BIND_ADDRESS"), "serve net/http/pprof on this address (e.g. 127.0.0.1:6060); empty disables (env FLEET_AGENT_PPROF_BIND_ADDRESS)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	logFlags := logging.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println("fleet-agent", version.String())
		return
	}
	log := logFlags.Setup("fleet-agent")
	for _, e := range ignored {
		log.Info("WARNING: ignoring environment variable, using the default instead",
			"variable", e.name, "value", e.value, "expected", e.expected, "default", e.def)
	}
	if limit := memlimit.Apply(); limit > 0 {
		log.Info("Go memory limit set from the container limit", "bytes", limit)
	}

	var err error
	if *kubeconfig != "" {
		opts.Downstream, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		opts.Downstream, err = ctrl.GetConfig()
	}
	if err != nil {
		log.Error(err, "loading the downstream cluster config")
		os.Exit(1)
	}
	if *pprofAddr != "" {
		go servePprof(*pprofAddr, log)
	}
	log.Info("starting", "version", version.String(), "namespace", opts.Namespace, "checkinInterval", opts.CheckinInterval.String())
	if sims.count > 0 {
		sims.checkin = opts.CheckinInterval
		if err := runSimulators(ctrl.SetupSignalHandler(), opts.Downstream, opts.Namespace, sims); err != nil {
			log.Error(err, "simulators stopped")
			os.Exit(1)
		}
		return
	}
	// SIGTERM/SIGINT cancel the context; Run then stops its manager and
	// returns.
	if err := agent.Run(ctrl.SetupSignalHandler(), opts); err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
	log.Info("stopped")
}

// servePprof serves the Go profiles (heap, CPU, goroutines) for footprint
// investigations; it is off unless asked for, and meant for localhost.
func servePprof(addr string, log logr.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		log.Error(err, "pprof server stopped", "address", addr)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// ignoredEnv is an environment variable main could not use: its value
// and what it took instead. None of the variables read here is secret.
type ignoredEnv struct{ name, value, expected, def string }

// envDuration is $k as a Go duration (1.5h, 30s), else def: unset, empty
// or zero (Rancher's "0 is the default") quietly, anything else (a typo,
// a negative value) recorded in ignored for main to log.
func envDuration(k string, def time.Duration, ignored *[]ignoredEnv) time.Duration {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	switch {
	case err == nil && d > 0:
		return d
	case err != nil || d < 0:
		*ignored = append(*ignored, ignoredEnv{name: k, value: v, expected: "a positive duration such as 30s or 1.5h", def: def.String()})
	}
	return def
}

// envInt is $k as a whole number of 1 or more, else def: unset or empty
// quietly, anything else recorded in ignored for main to log.
func envInt(k string, def int, ignored *[]ignoredEnv) int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	*ignored = append(*ignored, ignoredEnv{name: k, value: v, expected: "a whole number of 1 or more", def: strconv.Itoa(def)})
	return def
}
