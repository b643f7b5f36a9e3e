// Package cli implements the `fleet` command line: installing the manager and
// agents, building and applying bundles, and looking at the fleet.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetgo/fleet/internal/scheme"
	"github.com/fleetgo/fleet/internal/version"
)

// Globals are the flags every subcommand shares.
type Globals struct {
	Kubeconfig string
	Context    string
	Namespace  string
	// Debug and DebugLevel are Fleet's --debug and --debug-level.
	Debug      bool
	DebugLevel int
}

// RESTConfig loads the kubeconfig from --kubeconfig, $KUBECONFIG or
// ~/.kube/config. Every command that connects goes through here, so that
// all of them explain a missing kubeconfig the same way.
func (g *Globals) RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if g.Kubeconfig != "" {
		rules.ExplicitPath = g.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: g.Context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, explainKubeconfigError(err)
	}
	return cfg, nil
}

// explainKubeconfigError replaces client-go's "no configuration has been
// provided, try setting KUBERNETES_MASTER" (a variable this CLI does not
// read) with the ways this CLI takes a kubeconfig, including the
// quickstart's; any other error is said to come from the kubeconfig.
func explainKubeconfigError(err error) error {
	if !clientcmd.IsEmptyConfig(err) {
		return fmt.Errorf("loading the kubeconfig of the manager cluster: %w", err)
	}
	why := "neither is set and ~/.kube/config does not exist"
	if env := os.Getenv("KUBECONFIG"); env != "" {
		// client-go skips files of KUBECONFIG that do not exist: a
		// relative path exported in another directory, say.
		why = fmt.Sprintf("KUBECONFIG=%s names no existing file", env)
	}
	return errors.New("no kubeconfig for the manager cluster: pass --kubeconfig (-k) or set KUBECONFIG " +
		"(" + why + "). For the quickstart (`make quickstart`) it is " +
		".fleet-dev/upstream/kubeconfig in the repository: bin/fleet status -k .fleet-dev/upstream/kubeconfig -n fleet-default")
}

// Client returns a client for the manager cluster.
func (g *Globals) Client() (client.Client, error) {
	cfg, err := g.RESTConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
}

// setupDebugLog is --debug: a logger to w at V(max(1, --debug-level)) for
// the CLI's own messages and controller-runtime's; --debug-level also sets
// klog's verbosity (client-go's requests at 6 and above), as Fleet does.
func (g *Globals) setupDebugLog(w io.Writer) logr.Logger {
	v := min(max(g.DebugLevel, 1), 127)
	log := zap.New(zap.WriteTo(w), zap.ConsoleEncoder(), zap.Level(zapcore.Level(-v)))
	ctrl.SetLogger(log)
	if g.DebugLevel > 0 {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", strconv.Itoa(g.DebugLevel))
		klog.SetLogger(log)
	}
	return log.WithName("fleet")
}

// NewRoot returns the `fleet` command with every subcommand.
func NewRoot() *cobra.Command {
	g := &Globals{}
	root := &cobra.Command{
		Use:           "fleet",
		Short:         "GitOps for fleets of Kubernetes clusters",
		Long:          "fleet installs the Fleet manager and agents, builds bundles from directories and applies them,\nand shows what is deployed where.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	defNS := os.Getenv("NAMESPACE")
	if defNS == "" {
		defNS = "fleet-local"
	}
	root.PersistentFlags().StringVarP(&g.Kubeconfig, "kubeconfig", "k", "", "kubeconfig for the manager cluster (default $KUBECONFIG or ~/.kube/config)")
	root.PersistentFlags().StringVar(&g.Context, "context", "", "kubeconfig context to use")
	root.PersistentFlags().StringVarP(&g.Namespace, "namespace", "n", defNS, "namespace (workspace) of the objects (env NAMESPACE)")
	root.PersistentFlags().BoolVar(&g.Debug, "debug", false, "log debug messages to stderr")
	root.PersistentFlags().IntVar(&g.DebugLevel, "debug-level", 0, "verbosity of the debug log, also of client-go (klog -v); a level above 0 implies --debug")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if g.DebugLevel < 0 {
			return fmt.Errorf("--debug-level must not be negative, got %d", g.DebugLevel)
		}
		if !g.Debug && g.DebugLevel == 0 {
			return nil
		}
		log := g.setupDebugLog(cmd.ErrOrStderr())
		cmd.SetContext(logr.NewContext(cmd.Context(), log))
		return nil
	}
	root.AddCommand(newVersionCmd())
	for _, add := range subcommands {
		root.AddCommand(add(g))
	}
	return root
}

// subcommands are registered by the files that implement them, so that each
// command lives next to its own code.
var subcommands []func(*Globals) *cobra.Command

func register(f func(*Globals) *cobra.Command) { subcommands = append(subcommands, f) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "fleet", version.String())
		},
	}
}
