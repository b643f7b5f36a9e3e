package install

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/charts"
)

// ControllerOptions are the settings of `fleet install controller`.
type ControllerOptions struct {
	// SystemNamespace is where the controller runs (default cattle-fleet-system).
	SystemNamespace string
	// ControllerImage and AgentImage ("repo[:tag]") override the charts' images.
	ControllerImage string
	AgentImage      string
	// CRDsOnly prints only the CustomResourceDefinitions.
	CRDsOnly bool
	// Values are extra values for the fleet chart.
	Values map[string]any
}

// Controller renders the manager: the CRDs, then (unless CRDsOnly) the
// system namespace and the fleet chart, as `kubectl apply`-able YAML.
func Controller(opts ControllerOptions) (string, error) {
	if opts.SystemNamespace == "" {
		opts.SystemNamespace = fleet.DefaultSystemNamespace
	}
	crds, err := Render(charts.CRD, RenderOptions{Namespace: opts.SystemNamespace})
	if err != nil {
		return "", err
	}
	if opts.CRDsOnly {
		return crds, nil
	}
	values := copyValues(opts.Values)
	if opts.ControllerImage != "" {
		values["image"] = imageValues(opts.ControllerImage)
	}
	if opts.AgentImage != "" {
		values["agentImage"] = imageValues(opts.AgentImage)
	}
	ctrl, err := Render(charts.Controller, RenderOptions{ReleaseName: "fleet", Namespace: opts.SystemNamespace, Values: values})
	if err != nil {
		return "", err
	}
	ns, err := namespaceYAML(opts.SystemNamespace)
	if err != nil {
		return "", err
	}
	return crds + ns + ctrl, nil
}

// AgentOptions are the settings of the agent manifests printed by `fleet
// install agent-token`.
type AgentOptions struct {
	// SystemNamespace is where the agent runs (default cattle-fleet-system).
	SystemNamespace string
	// Values are the fleet-agent chart values (normally a token's values).
	Values map[string]any
	// WithConfig also renders the fleet-agent ConfigMap from Values (labels,
	// clientID). Without it the ConfigMap is left to `fleet install
	// agent-config`, so that applying the token does not overwrite it.
	WithConfig bool
}

// Agent renders the agent namespace and the fleet-agent chart.
func Agent(opts AgentOptions) (string, error) {
	if opts.SystemNamespace == "" {
		opts.SystemNamespace = fleet.DefaultSystemNamespace
	}
	values := copyValues(opts.Values)
	internal, _ := values["internal"].(map[string]any)
	if internal == nil {
		internal = map[string]any{}
	}
	internal["systemNamespace"] = opts.SystemNamespace
	values["internal"] = internal
	values["agentConfig"] = map[string]any{"create": opts.WithConfig}
	agent, err := Render(charts.Agent, RenderOptions{ReleaseName: "fleet-agent", Namespace: opts.SystemNamespace, Values: values})
	if err != nil {
		return "", err
	}
	ns, err := namespaceYAML(opts.SystemNamespace)
	if err != nil {
		return "", err
	}
	return ns + agent, nil
}

// AgentConfig is the content of the fleet-agent ConfigMap's "config" key
// (contract 4), read by the agent when it registers.
type AgentConfig struct {
	Labels                    map[string]string `json:"labels"`
	ClientID                  string            `json:"clientID"`
	AgentTLSMode              string            `json:"agentTLSMode"`
	GarbageCollectionInterval string            `json:"garbageCollectionInterval"`
}

// AgentConfigMap renders the agent namespace and the fleet-agent ConfigMap
// that gives a cluster its labels (and optionally client ID) at registration.
func AgentConfigMap(systemNamespace string, cfg AgentConfig) (string, error) {
	if systemNamespace == "" {
		systemNamespace = fleet.DefaultSystemNamespace
	}
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	if cfg.AgentTLSMode == "" {
		cfg.AgentTLSMode = "system-store"
	}
	if cfg.GarbageCollectionInterval == "" {
		cfg.GarbageCollectionInterval = "15m"
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: systemNamespace, Labels: map[string]string{"app": "fleet-agent"}},
		Data:       map[string]string{"config": string(data)},
	}
	out, err := yaml.Marshal(cm)
	if err != nil {
		return "", err
	}
	ns, err := namespaceYAML(systemNamespace)
	if err != nil {
		return "", err
	}
	return ns + "---\n" + string(out), nil
}

func namespaceYAML(name string) (string, error) {
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
	out, err := yaml.Marshal(ns)
	if err != nil {
		return "", err
	}
	// Drop the empty spec/status a typed Namespace marshals to.
	s := strings.Replace(string(out), "spec: {}\n", "", 1)
	s = strings.Replace(s, "status: {}\n", "", 1)
	s = strings.Replace(s, "  creationTimestamp: null\n", "", 1)
	return "---\n" + s, nil
}

// imageValues splits "registry:5000/repo/name:tag" into the charts'
// {repository, tag}; without a tag the chart's appVersion is used.
func imageValues(ref string) map[string]any {
	repo, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	return map[string]any{"repository": repo, "tag": tag}
}

// ParseValues reads a values.yaml document.
func ParseValues(data []byte) (map[string]any, error) {
	out := map[string]any{}
	if err := yaml.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("parsing values: %w", err)
	}
	return out, nil
}
