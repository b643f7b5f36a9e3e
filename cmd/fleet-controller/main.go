// Command fleet-controller runs the Fleet manager.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetgo/fleet/internal/controller/schedule"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/kubeclient"
	"github.com/fleetgo/fleet/internal/logging"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/memlimit"
	"github.com/fleetgo/fleet/internal/registration"
	"github.com/fleetgo/fleet/internal/version"
)

func main() {
	var opts manager.Options
	var caFile string
	fs := pflag.NewFlagSet("fleet-controller", pflag.ExitOnError)
	fs.StringVar(&opts.SystemNamespace, "namespace", envOr("NAMESPACE", "cattle-fleet-system"), "namespace the controller runs in (env NAMESPACE)")
	fs.StringVar(&opts.APIServerURL, "api-server-url", os.Getenv("API_SERVER_URL"), "URL agents use to reach this cluster (env API_SERVER_URL; default: from the kubeconfig)")
	fs.StringVar(&caFile, "api-server-ca-file", "", "PEM file of the CA agents use to verify this cluster (default: from the kubeconfig)")
	fs.DurationVar(&opts.AgentCheckinInterval, "agent-checkin-interval", 15*time.Minute, "how often agents report in: the interval of agents installed on imported clusters and the one registration tokens' values give the fleet-agent chart (internal.checkinInterval); a cluster is Offline after 3 × the longer of this and the interval its agent reports")
	fs.DurationVar(&opts.GarbageCollectionInterval, "garbage-collection-interval", 0, "how often agents installed on imported clusters remove releases whose BundleDeployment is gone (chart value garbageCollectionInterval); 0: not set, they use their default of 15m")
	fs.StringVar(&opts.ShardID, "shard-id", "", "only reconcile objects labelled fleet.cattle.io/shard-ref=<id>")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", envOr("FLEET_METRICS_BIND_ADDRESS", ":8080"), "metrics address; 0 disables (env FLEET_METRICS_BIND_ADDRESS)")
	fs.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "health probe address; 0 disables")
	fs.StringVar(&opts.WebhookAddr, "webhook-bind-address", ":8082", "git webhook receiver address; 0 disables (so does --gitops=false); the chart sets 0 on shards")
	fs.BoolVar(&opts.WebhookAllowUnsigned, "webhook-allow-unsigned", os.Getenv("FLEET_WEBHOOK_ALLOW_UNSIGNED") == "true", "take git webhooks unchecked, signed or not, while Secret gitjob-webhook holds no key, as Rancher Fleet does (a migration aid: anyone who reaches the receiver can then trigger polls); once it holds any key, and for a GitRepo with its own webhookSecret, a valid signature is needed (env FLEET_WEBHOOK_ALLOW_UNSIGNED=true)")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "use a Lease so that only one replica acts")
	gitOps := fs.Bool("gitops", true, "run the GitRepo controller and its git webhook receiver; false leaves GitRepos as they are (their Bundles stay deployed)")
	helmOps := fs.Bool("helmops", true, "run the HelmOp controller (charts from repositories without git)")
	fs.BoolVar(&opts.Schedules, "schedules", envBool(schedule.EnvEnable), "run the Schedule controller (experimental, as in Rancher Fleet): Clusters targeted by a Schedule deploy changes only inside its windows (env "+schedule.EnvEnable+"=true); off, Cluster flags are left as they are (held clusters stay held, as in Rancher Fleet); only a deleted Schedule clears its clusters' flags (those no remaining Schedule lists) and is released")
	fs.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", 30*time.Second, "lease duration")
	fs.DurationVar(&opts.RenewDeadline, "leader-election-renew-deadline", 25*time.Second, "lease renew deadline")
	fs.DurationVar(&opts.RetryPeriod, "leader-election-retry-period", 10*time.Second, "lease retry period")
	fs.StringVar(&opts.BootstrapNamespace, "bootstrap-namespace", "fleet-local", "namespace of the local Cluster and default ClusterGroup; empty disables")
	fs.StringToStringVar(&opts.BootstrapClusterLabels, "bootstrap-cluster-labels", nil, "labels (key=value,...) of the local Cluster besides name=local, applied at every start: a key dropped here is removed, labels added by hand stay")
	fs.StringVar(&opts.BootstrapRepo.Repo, "bootstrap-repo", "", "git URL of GitRepo \"bootstrap\" in the bootstrap namespace, applied at every start; empty: none, and a GitRepo \"bootstrap\" an earlier start applied is deleted (one made by hand is kept)")
	fs.StringVar(&opts.BootstrapRepo.Secret, "bootstrap-secret", "", "clientSecretName of GitRepo \"bootstrap\" (a Secret of the bootstrap namespace)")
	fs.StringVar(&opts.BootstrapRepo.Branch, "bootstrap-branch", "master", "branch of GitRepo \"bootstrap\"")
	fs.StringVar(&opts.BootstrapRepo.Paths, "bootstrap-paths", "", "comma-separated paths of GitRepo \"bootstrap\"; empty: the repository root")
	fs.StringVar(&opts.BootstrapAgentNamespace, "bootstrap-agent-namespace", "", "namespace the local Cluster's agent runs in, set as its spec.agentNamespace at every start (emptied later, the value set before is removed; not a namespace name, or one that would move the installed local agent: left out, Warning Event InvalidBootstrapValues); empty: not set by the bootstrap")
	fs.BoolVar(&opts.BootstrapLocalAgentDisabled, "bootstrap-local-agent-disabled", false, "install no agent for Cluster \"local\" of the bootstrap namespace, and remove the one installed before (only when its kubeconfig reaches this cluster: same kube-system UID); the Cluster stays, Imported=False with reason LocalAgentDisabled")
	fs.IntVar(&opts.Workers, "workers", 50, "concurrent reconciles per controller")
	fs.IntVar(&opts.MaxInFlight, "max-requests-in-flight", kubeclient.DefaultMaxInFlight, "API requests (watches and Lease renewals excepted) the controller keeps in flight at most; keep it under the API server's --http2-max-streams-per-connection (100 by default)")
	fs.DurationVar(&opts.AgentTokenTTL, "agent-token-ttl", 30*24*time.Hour, "lifetime of agent credentials, 10m at least (the API server refuses shorter tokens, and may cap longer ones); agents renew them at 60% of it")
	fs.StringVar(&opts.AgentImage, "agent-image", os.Getenv("AGENT_IMAGE"), "fleet-agent image installed on clusters imported from a kubeconfig (env AGENT_IMAGE; empty: "+registration.DefaultAgentImage+")")
	opts.Agent.AddFlags(fs)
	fs.BoolVar(&opts.RegistrationTokenTTLRequired, "registration-token-ttl-required", os.Getenv("FLEET_REGISTRATION_TOKEN_TTL_REQUIRED") == "true", "delete ClusterRegistrationTokens that have no TTL (or one of 0 or less) (env FLEET_REGISTRATION_TOKEN_TTL_REQUIRED=true)")
	fs.BoolVar(&opts.IgnoreClusterRegistrationLabels, "ignore-cluster-registration-labels", false, "drop every label agents send when they register; a Cluster created at registration gets only the labels the manager sets")
	fs.StringVar(&opts.ContentAPI.Addr, "content-api-addr", ":8443", "address of the content API that agents read manifests through (behind the API server's aggregation layer); 0 disables it and grants each cluster Contents through a ClusterRoleBinding instead, as the manager does by itself when the API server has no aggregation layer")
	fs.StringVar(&opts.ContentAPI.Service, "content-api-service", "fleet-content-api", "Service (in --namespace) the content API's APIService points at")
	fs.Int32Var(&opts.ContentAPI.Port, "content-api-service-port", 443, "port of that Service")
	fs.StringVar(&opts.ContentAPI.ExternalName, "content-api-external-name", "", "write the Service as ExternalName for this host and point the APIService at the listening port (for an API server outside the pod network)")
	fs.Int64Var(&opts.GitLimits.MaxFetchBytes, "git-fetch-max-bytes", git.DefaultMaxFetchBytes, "bytes a GitRepo fetch may store on disk before it is cut off (the GitRepo is then Stalled)")
	fs.Int64Var(&opts.GitLimits.MaxBytes, "git-checkout-max-bytes", git.DefaultMaxBytes, "total size of the files a GitRepo commit may hold")
	fs.IntVar(&opts.GitLimits.MaxFiles, "git-checkout-max-files", git.DefaultMaxFiles, "number of files a GitRepo commit may hold")
	fs.BoolVar(&opts.InsecureSkipHostKeyChecks, "insecure-skip-host-key-checks", false, "accept any SSH host key when cloning GitRepos and fetching git:: chart sources of GitRepos and HelmOps (insecure); otherwise servers are checked against the client Secret's known_hosts or the known-hosts ConfigMap in --namespace")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the manager cluster (env KUBECONFIG; empty: the in-cluster config, else ~/.kube/config)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	logFlags := logging.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println("fleet-controller", version.String())
		return
	}
	if opts.GarbageCollectionInterval < 0 {
		fmt.Fprintln(os.Stderr, "--garbage-collection-interval must not be negative")
		os.Exit(2)
	}
	if err := validateAgentFlags(opts.Agent); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	opts.DisableGitOps = !*gitOps
	opts.DisableHelmOps = !*helmOps
	log := logFlags.Setup("fleet-controller")
	if limit := memlimit.Apply(); limit > 0 {
		log.Info("Go memory limit set from the container limit", "bytes", limit)
	}

	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			log.Error(err, "reading --api-server-ca-file")
			os.Exit(1)
		}
		opts.APIServerCA = b
	}
	if *kubeconfig != "" {
		_ = os.Setenv("KUBECONFIG", *kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig")
		os.Exit(1)
	}
	if opts.WebhookAllowUnsigned && !opts.DisableGitOps {
		log.Info("unsigned git webhooks are taken while Secret gitjob-webhook holds no key (--webhook-allow-unsigned)")
	}
	log.Info("starting", "version", version.String(), "shard", opts.ShardID)
	if err := manager.Run(ctrl.SetupSignalHandler(), cfg, opts); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

// validateAgentFlags refuses agent counts that are zero (a flag's zero
// would silently mean the agent's default) and settings the agent could
// not run with. A zero --agent-leader-election-* duration is the agent's
// default, as 0 is in Rancher's chart (AgentSettings.Validate).
func validateAgentFlags(s registration.AgentSettings) error {
	switch {
	case s.Replicas < 1:
		return fmt.Errorf("--agent-replicas must be at least 1, have %d", s.Replicas)
	case s.Workers < 1:
		return fmt.Errorf("--agent-workers must be at least 1, have %d", s.Workers)
	}
	return s.Validate()
}

// envBool reads k as strconv.ParseBool does; unset or unparsable is false,
// as Rancher Fleet reads its experimental flags.
func envBool(k string) bool {
	v, err := strconv.ParseBool(os.Getenv(k))
	return err == nil && v
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
