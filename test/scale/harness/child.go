package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // profiles of the child processes
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/agent/simulator"
	"github.com/fleetgo/fleet/internal/manager"
	"github.com/fleetgo/fleet/internal/memlimit"
)

// The harness runs the manager and the simulated agents as child
// processes of its own binary (so that their CPU and memory can be read
// from /proc and profiled apart): the environment variable names the role
// and a JSON file holds its configuration.
const (
	childEnv       = "FLEET_SCALE_CHILD"
	childConfigEnv = "FLEET_SCALE_CHILD_CONFIG"
)

// childConfig is what a child process needs.
type childConfig struct {
	// Kubeconfig of the upstream cluster (manager) or of the downstream
	// cluster (agents, real apply).
	Kubeconfig string `json:"kubeconfig"`
	// PprofAddr serves net/http/pprof; the child writes the bound address
	// to stdout as "PPROF <addr>".
	PprofAddr string `json:"pprofAddr"`
	// Manager.
	ManagerQPS float32 `json:"managerQPS,omitempty"`
	// MaxInFlight is manager.Options.MaxInFlight (0: its default).
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// MemoryLimit is the container memory limit the manager runs as if
	// under (bytes; 0: none): it gets the soft limit memlimit would set.
	MemoryLimit     int64         `json:"memoryLimit,omitempty"`
	CheckinInterval time.Duration `json:"checkinInterval"`
	// ShardID makes the manager a shard (only bundles labelled with it).
	ShardID string `json:"shardID,omitempty"`
	// Schedules enables the Schedule controller (manager.Options.Schedules,
	// fleet-controller's --schedules), for the schedule scenario only.
	Schedules bool `json:"schedules,omitempty"`
	// Agents.
	Count          int                 `json:"count,omitempty"`
	Mode           simulator.Mode      `json:"mode,omitempty"`
	Bootstrap      *register.Bootstrap `json:"bootstrap,omitempty"`
	ClientIDPrefix string              `json:"clientIDPrefix,omitempty"`
	// RegisterConcurrency bounds the agents registering at once (0: all).
	RegisterConcurrency int `json:"registerConcurrency,omitempty"`
}

// MaybeChild runs the child role named in the environment and exits; it
// returns at once in the harness itself. Call it first in main and
// TestMain.
func MaybeChild() {
	role := os.Getenv(childEnv)
	if role == "" {
		return
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(false)))
	err := runChild(role)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child", role, "failed:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(role string) error {
	raw, err := os.ReadFile(os.Getenv(childConfigEnv))
	if err != nil {
		return err
	}
	var cfg childConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(ln, nil) }()
	fmt.Printf("PPROF %s\n", ln.Addr())
	switch role {
	case "manager":
		return runManager(ctx, cfg)
	case "agents":
		return runAgents(ctx, cfg)
	}
	return fmt.Errorf("unknown child role %q", role)
}

// runManager runs the manager as cmd/fleet-controller does (same client
// config defaults via ctrl.GetConfig), without leader election, bootstrap
// cluster or listeners, so that the benchmark counts only its clusters.
func runManager(ctx context.Context, cfg childConfig) error {
	_ = os.Setenv("KUBECONFIG", cfg.Kubeconfig)
	rc, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	rc.UserAgent = managerUserAgent
	if cfg.MemoryLimit > 0 {
		memlimit.ApplyLimit(cfg.MemoryLimit)
	}
	if cfg.ManagerQPS > 0 {
		rc.QPS, rc.Burst = cfg.ManagerQPS, int(cfg.ManagerQPS*2)
	}
	fmt.Printf("READY rss=%d anon=%d\n", rssBytes(os.Getpid()), anonBytes(os.Getpid()))
	return manager.Run(ctx, rc, manager.Options{
		LeaderElection: false, MetricsAddr: "0", ProbeAddr: "0", WebhookAddr: "0",
		AgentCheckinInterval: cfg.CheckinInterval, ShardID: cfg.ShardID, MaxInFlight: cfg.MaxInFlight,
		Schedules: cfg.Schedules,
	})
}

// runAgents runs the simulated agents; it prints its own memory before the
// first agent starts so that the harness can tell the per-agent cost.
func runAgents(ctx context.Context, cfg childConfig) error {
	opts := simulator.Options{Count: cfg.Count, Bootstrap: cfg.Bootstrap, Mode: cfg.Mode,
		ClientIDPrefix: cfg.ClientIDPrefix, CheckinInterval: cfg.CheckinInterval, Concurrency: cfg.RegisterConcurrency}
	if cfg.Mode == simulator.RealApply {
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return err
		}
		rc.QPS, rc.Burst = 50, 100
		opts.Downstream = rc
	}
	sim, err := simulator.New(opts)
	if err != nil {
		return err
	}
	fmt.Printf("READY rss=%d anon=%d\n", rssBytes(os.Getpid()), anonBytes(os.Getpid()))
	go func() {
		for ctx.Err() == nil {
			time.Sleep(10 * time.Second)
			fmt.Fprintf(os.Stderr, "simulator: registered=%d applied=%d failures=%d heartbeats=%d\n",
				sim.Stats.Registered.Load(), sim.Stats.Applied.Load(), sim.Stats.Failures.Load(), sim.Stats.Heartbeats.Load())
		}
	}()
	return sim.Run(ctx)
}

// childCommand builds the command of a child role, writing its config.
func childCommand(role, dir string, cfg childConfig) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	path := fmt.Sprintf("%s/%s-config.json", dir, role)
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+role, childConfigEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}
