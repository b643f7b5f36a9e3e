package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/install"
)

func init() { register(newInstallCmd) }

func newInstallCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Generate manifests to install the Fleet manager and register clusters",
		Long: "Generate manifests to install the Fleet manager (controller) and to register downstream clusters\n" +
			"(agent-token, agent-config). The manifests are rendered from the same Helm charts that are\n" +
			"embedded in this binary; pipe them into `kubectl apply -f -`.",
	}
	cmd.AddCommand(newInstallControllerCmd(), newInstallAgentTokenCmd(g), newInstallAgentConfigCmd())
	return groupCommand(cmd)
}

func newInstallControllerCmd() *cobra.Command {
	var opts install.ControllerOptions
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Generate deployment manifest to run the fleet controller",
		Long: "Generate deployment manifest to run the fleet controller: the CustomResourceDefinitions, the\n" +
			"system namespace and the fleet chart (Deployment, ServiceAccount, RBAC, ConfigMap, Services).\n" +
			"Needs no connection to a cluster.\n\n" +
			"  fleet install controller | kubectl apply -f -",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkSystemNamespace(opts.SystemNamespace); err != nil {
				return err
			}
			out, err := install.Controller(opts)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.CRDsOnly, "crds-only", false, "Output CustomResourceDefinitions only")
	f.StringVar(&opts.ControllerImage, "controller-image", "", "Image to use for controller (repository[:tag])")
	f.StringVar(&opts.AgentImage, "agent-image", "", "Image of the agents the manager installs itself (imported clusters, the local cluster) (repository[:tag]); agents installed with the fleet-agent chart take the chart's image")
	f.StringVar(&opts.SystemNamespace, "system-namespace", fleet.DefaultSystemNamespace, "Namespace that will be used in controller and agent cluster")
	return cmd
}

func newInstallAgentConfigCmd() *cobra.Command {
	var (
		labels   []string
		clientID string
		ns       string
	)
	cmd := &cobra.Command{
		Use:   "agent-config",
		Short: "Generate cluster specific agent config",
		Long: "Generate the fleet-agent ConfigMap that gives a cluster its labels (and optionally its client ID)\n" +
			"when it registers. Apply it to the downstream cluster before the agent-token manifests:\n\n" +
			"  fleet install agent-config -l env=prod | kubectl --kubeconfig=cluster-kubeconfig apply -f -",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkSystemNamespace(ns); err != nil {
				return err
			}
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			out, err := install.AgentConfigMap(ns, install.AgentConfig{Labels: l, ClientID: clientID})
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&labels, "labels", "l", nil, "Labels (key=value) the cluster gets at registration; repeatable")
	f.StringVar(&clientID, "client-id", "", "Register as the predefined Cluster with this spec.clientID")
	f.StringVar(&ns, "system-namespace", fleet.DefaultSystemNamespace, "Namespace of the agent")
	return cmd
}

// checkSystemNamespace refuses a --system-namespace that is no namespace
// name (a DNS-1123 label) before anything is printed: the manifests would
// only fail when applied, half of them perhaps created.
func checkSystemNamespace(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("--system-namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

// parseLabels turns k=v strings into valid Kubernetes labels.
func parseLabels(in []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range in {
		for _, part := range strings.Split(kv, ",") {
			k, v, ok := strings.Cut(part, "=")
			if !ok {
				return nil, fmt.Errorf("label %q: expected key=value", part)
			}
			k = strings.TrimSpace(k)
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return nil, fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				return nil, fmt.Errorf("label %s value %q: %s", k, v, strings.Join(errs, "; "))
			}
			out[k] = v
		}
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
