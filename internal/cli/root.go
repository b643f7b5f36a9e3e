// Package cli implements the `fleet` command line: installing the manager and
// agents, building and applying bundles, and looking at the fleet.
package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/scheme"
	"github.com/fleetgo/fleet/internal/version"
)

// Globals are the flags every subcommand shares.
type Globals struct {
	Kubeconfig string
	Context    string
	Namespace  string
}

// RESTConfig loads the kubeconfig from --kubeconfig, $KUBECONFIG or
// ~/.kube/config.
func (g *Globals) RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if g.Kubeconfig != "" {
		rules.ExplicitPath = g.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: g.Context}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
}

// Client returns a client for the manager cluster.
func (g *Globals) Client() (client.Client, error) {
	cfg, err := g.RESTConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme.Scheme})
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
