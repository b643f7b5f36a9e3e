package cli

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/registration"
)

// agentTokenOptions are the flags of `fleet install agent-token`.
type agentTokenOptions struct {
	TTL             string
	Group           string
	ServerURL       string
	CAFile          string
	NoCA            bool
	SystemNamespace string
	ValuesOnly      bool
	Timeout         time.Duration
}

func newInstallAgentTokenCmd(g *Globals) *cobra.Command {
	opts := agentTokenOptions{}
	cmd := &cobra.Command{
		Use:   "agent-token",
		Short: "Generate a registration token and render the manifests that register clusters with it (into a ClusterGroup with -g)",
		Long: "Create a ClusterRegistrationToken in the workspace (--namespace) of the manager cluster, wait for\n" +
			"the fleet-controller to issue its values, and print the agent manifests that register a cluster\n" +
			"with it (or, with --values, the values.yaml for `helm install fleet-agent`). The token can\n" +
			"register any number of clusters until its TTL expires.\n\n" +
			"The API server URL and CA that agents use are the ones the manager writes into the token's\n" +
			"values (what fleet-controller was installed with), as in the token's Secret; override them\n" +
			"with --server-url and --ca-file (or --no-ca). When the manager gives none, or was installed\n" +
			"without apiServerURL (its own in-cluster address), the server and CA of your kubeconfig are used.\n\n" +
			"--group names a ClusterGroup of the workspace: the labels of its selector's matchLabels are\n" +
			"given to every cluster registered with the token, so that the cluster joins the group. The\n" +
			"printed manifests then carry the fleet-agent ConfigMap with those labels (replacing one from\n" +
			"agent-config); without --group they leave that ConfigMap to agent-config.\n\n" +
			"  fleet --kubeconfig=fleet-controller-config install agent-token > token\n" +
			"  kubectl --kubeconfig=cluster-kubeconfig apply -f token",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.RESTConfig()
			if err != nil {
				return err
			}
			c, err := g.Client()
			if err != nil {
				return err
			}
			explicitGroup := cmd.Flags().Changed("group")
			out, err := agentToken(cmd.Context(), c, cfg, g.Namespace, opts, explicitGroup)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.TTL, "ttl", "t", "1440m", "How long the generated registration token is valid, 0 means forever (negative is refused)")
	f.StringVarP(&opts.Group, "group", "g", "", "ClusterGroup in the workspace whose matchLabels become the labels of registered clusters; without it no labels are added")
	f.StringVar(&opts.ServerURL, "server-url", "", "The full https:// URL to the fleet management server (default: the token's apiServerURL, else the kubeconfig's)")
	f.StringVarP(&opts.CAFile, "ca-file", "c", "", "File containing optional CA cert (PEM) for fleet management server (default: the token's apiServerCA, else the kubeconfig's)")
	f.BoolVar(&opts.NoCA, "no-ca", false, "Do not give agents a CA (the server's certificate is publicly trusted)")
	f.StringVar(&opts.SystemNamespace, "system-namespace", fleet.DefaultSystemNamespace, "System namespace of the controller and the agents")
	f.BoolVar(&opts.ValuesOnly, "values", false, "Print only the values.yaml for helm install of the fleet-agent chart")
	f.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "How long to wait for the fleet-controller to issue the token's values")
	_ = cmd.RegisterFlagCompletionFunc("group", func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		c, err := g.Client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var list fleet.ClusterGroupList
		if err := c.List(cmd.Context(), &list, client.InNamespace(g.Namespace)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, cg := range list.Items {
			names = append(names, cg.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// agentToken validates the options, creates the token, waits for its
// values and renders the output. Nothing is created when the options are
// invalid; a token created for an output that then fails is deleted.
func agentToken(ctx context.Context, c client.Client, cfg *rest.Config, workspace string, opts agentTokenOptions, explicitGroup bool) (string, error) {
	ttl, err := time.ParseDuration(opts.TTL)
	if err != nil {
		return "", fmt.Errorf("--ttl %q: %w", opts.TTL, err)
	}
	if ttl < 0 {
		return "", fmt.Errorf("--ttl %q: must not be negative (0 means the token never expires)", opts.TTL)
	}
	if opts.Timeout <= 0 {
		return "", fmt.Errorf("--timeout %s: must be positive", opts.Timeout)
	}
	if err := checkSystemNamespace(opts.SystemNamespace); err != nil {
		return "", err
	}
	override, err := endpointFlags(opts)
	if err != nil {
		return "", err
	}
	var groupLabels map[string]string
	if explicitGroup {
		if groupLabels, err = clusterGroupLabels(ctx, c, workspace, opts.Group); err != nil {
			return "", err
		}
	}

	token := &fleet.ClusterRegistrationToken{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "token-", Namespace: workspace},
	}
	if ttl > 0 {
		token.Spec.TTL = &metav1.Duration{Duration: ttl}
	}
	if err := c.Create(ctx, token); err != nil {
		return "", fmt.Errorf("creating ClusterRegistrationToken in %s: %w", workspace, err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("created ClusterRegistrationToken", "namespace", workspace, "name", token.Name)
	out, err := agentTokenOutput(ctx, c, cfg, token, opts, override, groupLabels)
	if errors.Is(err, errTokenGone) {
		return "", err
	}
	if err != nil {
		return "", deleteToken(ctx, c, token, err)
	}
	return out, nil
}

// agentTokenOutput waits for the values of token and renders them.
func agentTokenOutput(ctx context.Context, c client.Client, cfg *rest.Config, token *fleet.ClusterRegistrationToken, opts agentTokenOptions, override endpoint, groupLabels map[string]string) (string, error) {
	raw, defaulted, err := waitForTokenValues(ctx, c, token, opts.Timeout)
	if err != nil {
		return "", err
	}
	values, err := install.ParseValues(raw)
	if err != nil {
		return "", fmt.Errorf("values of ClusterRegistrationToken %s/%s: %w", token.Namespace, token.Name, err)
	}
	fromToken := tokenEndpoint(values, defaulted)
	tokenURL := fromToken.URL
	url, ca, err := agentEndpoint(cfg, override, fromToken)
	if err != nil {
		return "", err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("agent endpoint", "apiServerURL", url, "tokenAPIServerURL", tokenURL, "caSet", ca != "")
	values["apiServerURL"] = url
	values["apiServerCA"] = ca
	if len(groupLabels) > 0 {
		labels, _ := values["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
		}
		for _, k := range sortedKeys(groupLabels) {
			labels[k] = groupLabels[k]
		}
		values["labels"] = labels
	}
	if opts.SystemNamespace != fleet.DefaultSystemNamespace {
		internal, _ := values["internal"].(map[string]any)
		if internal == nil {
			internal = map[string]any{}
		}
		internal["systemNamespace"] = opts.SystemNamespace
		values["internal"] = internal
	}
	if opts.ValuesOnly {
		out, err := yaml.Marshal(values)
		return string(out), err
	}
	return install.Agent(install.AgentOptions{
		SystemNamespace: opts.SystemNamespace,
		Values:          values,
		// Only the group's labels need the ConfigMap; otherwise leave it to
		// `fleet install agent-config`, which may already be applied.
		WithConfig: len(groupLabels) > 0,
	})
}

// deleteToken deletes a token whose output failed with cause, so that no
// usable token is left behind, and returns cause naming the token.
func deleteToken(ctx context.Context, c client.Client, token *fleet.ClusterRegistrationToken, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.Delete(ctx, token); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%w (ClusterRegistrationToken %s/%s was created but could not be deleted: %v; delete it: kubectl -n %s delete clusterregistrationtoken %s)",
			cause, token.Namespace, token.Name, err, token.Namespace, token.Name)
	}
	return fmt.Errorf("%w (ClusterRegistrationToken %s/%s deleted)", cause, token.Namespace, token.Name)
}

// endpoint is an API server URL and CA (PEM, or base64 of PEM); with set,
// an empty CA means "none".
type endpoint struct {
	URL   string
	CA    string
	CASet bool
}

// endpointFlags checks --server-url, --ca-file and --no-ca before anything
// is created.
func endpointFlags(opts agentTokenOptions) (endpoint, error) {
	e := endpoint{URL: opts.ServerURL}
	if e.URL != "" {
		if err := checkServerURL(e.URL); err != nil {
			return e, fmt.Errorf("--server-url: %w", err)
		}
	}
	switch {
	case opts.NoCA:
		e.CASet = true
	case opts.CAFile != "":
		ca, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return e, fmt.Errorf("--ca-file: %w", err)
		}
		if !isPEMOrBase64PEM(ca) {
			return e, fmt.Errorf("--ca-file %s: not a PEM certificate (or base64 of one)", opts.CAFile)
		}
		e.CA, e.CASet = string(ca), true
	}
	return e, nil
}

// tokenEndpoint is the URL and CA the manager wrote into a token's values,
// or none when its URL was not configured (defaulted): that is the
// manager's own view of its API server, in a cluster an in-cluster address
// downstream agents cannot use, and the kubeconfig's is the better guess.
func tokenEndpoint(values map[string]any, defaulted bool) endpoint {
	if defaulted {
		return endpoint{}
	}
	url, _ := values["apiServerURL"].(string)
	ca, _ := values["apiServerCA"].(string)
	return endpoint{URL: url, CA: ca}
}

// agentEndpoint is the URL and CA agents use. The flags win; then what the
// manager wrote into the token's values (the URL and CA it was installed
// with, which may differ from the address this kubeconfig reaches it at);
// then the kubeconfig. The kubeconfig's CA is only used with its URL.
func agentEndpoint(cfg *rest.Config, flags, token endpoint) (string, string, error) {
	url, fromKubeconfig := flags.URL, false
	if url == "" {
		url = token.URL
	}
	if url == "" {
		url, fromKubeconfig = cfg.Host, true
	}
	if url == "" {
		return "", "", fmt.Errorf("no server URL in the token's values or the kubeconfig: pass --server-url")
	}
	if err := checkServerURL(url); err != nil {
		return "", "", fmt.Errorf("server URL (pass --server-url): %w", err)
	}
	switch {
	case flags.CASet:
		return url, flags.CA, nil
	case token.CA != "":
		return url, token.CA, nil
	case !fromKubeconfig:
		return url, "", nil
	case len(cfg.CAData) > 0:
		return url, string(cfg.CAData), nil
	case cfg.CAFile != "":
		ca, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return "", "", fmt.Errorf("reading the kubeconfig's certificate-authority: %w", err)
		}
		return url, string(ca), nil
	}
	return url, "", nil
}

// checkServerURL: agents only talk HTTPS to the manager (the agent chart
// refuses anything else).
func checkServerURL(s string) error {
	u, err := neturl.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q must be an https:// URL", s)
	}
	return nil
}

// isPEMOrBase64PEM is what the agent chart accepts as apiServerCA.
func isPEMOrBase64PEM(b []byte) bool {
	return strings.Contains(string(pemOrBase64(string(b))), "-----BEGIN")
}

// clusterGroupLabels maps --group to labels: a ClusterGroup selects
// clusters by label, so a cluster joins the group by registering with the
// labels of the group's matchLabels (and single-value "In" expressions).
func clusterGroupLabels(ctx context.Context, c client.Client, workspace, name string) (map[string]string, error) {
	cg := &fleet.ClusterGroup{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: workspace, Name: name}, cg); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("--group %q: no ClusterGroup %s in namespace %s; create it with a matchLabels selector first", name, name, workspace)
		}
		return nil, fmt.Errorf("--group %q: %w", name, err)
	}
	labels := map[string]string{}
	if sel := cg.Spec.Selector; sel != nil {
		for k, v := range sel.MatchLabels {
			labels[k] = v
		}
		for _, e := range sel.MatchExpressions {
			if e.Operator != metav1.LabelSelectorOpIn || len(e.Values) != 1 {
				return nil, fmt.Errorf("--group %q: selector expression on %q (%s) cannot be turned into a label; use matchLabels", name, e.Key, e.Operator)
			}
			labels[e.Key] = e.Values[0]
		}
	}
	if len(labels) == 0 {
		return nil, fmt.Errorf("--group %q: ClusterGroup %s/%s has no matchLabels, so no label makes a cluster a member", name, workspace, name)
	}
	return labels, nil
}

// errTokenGone is in the error of a token deleted while the command waited
// for its values: there is nothing left to delete.
var errTokenGone = errors.New("was deleted")

// tokenGoneError says why a token disappears before its values are
// issued, so that the user does not wait for --timeout and then suspect
// that fleet-controller is not running.
func tokenGoneError(key client.ObjectKey) error {
	return fmt.Errorf("ClusterRegistrationToken %s/%s %w before the manager issued its values: the manager deletes a token "+
		"that has expired, and one without TTL when it requires one (controller.registrationTokenTTL.required: pass a --ttl "+
		"above 0; it records a %s event: kubectl -n %s get events --field-selector involvedObject.name=%s)",
		key.Namespace, key.Name, errTokenGone, registration.ReasonTTLRequired, key.Namespace, key.Name)
}

// waitForTokenValues polls until the fleet-controller has written the
// token's values Secret, and tells whether the manager's apiServerURL in it
// was defaulted rather than configured.
func waitForTokenValues(ctx context.Context, c client.Client, token *fleet.ClusterRegistrationToken, timeout time.Duration) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := client.ObjectKeyFromObject(token)
	for {
		cur := &fleet.ClusterRegistrationToken{}
		err := c.Get(ctx, key, cur)
		if apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp != nil) {
			return nil, false, tokenGoneError(key)
		}
		if err == nil && cur.Status.SecretName != "" {
			secret := &corev1.Secret{}
			err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: cur.Status.SecretName}, secret)
			if err == nil && len(secret.Data["values"]) > 0 {
				return secret.Data["values"], secret.Annotations[registration.APIServerURLDefaultedAnnotation] == "true", nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, false, fmt.Errorf("ClusterRegistrationToken %s/%s got no values within %s: is fleet-controller running on this cluster?", key.Namespace, key.Name, timeout)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
