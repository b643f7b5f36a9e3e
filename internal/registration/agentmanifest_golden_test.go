package registration

import (
	"encoding/json"
	"testing"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// defaultAgentConfigHash is the status.agentConfigHash of a Cluster
// imported by a manager with every agent setting at its default: the hash
// of the objects AgentObjects renders for it.
//
// A change of this value redeploys every imported agent on upgrade: the
// upgraded manager finds each Cluster's recorded hash different and
// installs its agent again. Change it only deliberately (a new agent
// default, a new object or field in the manifest), never to make this
// test pass after an unrelated change, and say so in the release notes.
const defaultAgentConfigHash = "66f54540bf93beacb9781de0abde6c69da25d551f8581de8fd4f3a6bdb703e5b"

// TestDefaultAgentManifestHash pins the manifest of an imported agent
// with default settings, however the manager got them: fleet-controller's
// flag defaults, the fleet chart's default values (which pass the agent's
// defaults explicitly), or none at all. A change of a default on either
// side (the agent's register.Default*, the manager's Options.Defaults)
// that writes something new into the manifest fails here.
func TestDefaultAgentManifestHash(t *testing.T) {
	var flagDefaults AgentSettings
	fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
	flagDefaults.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "fleet-default"},
		Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc"}}
	for _, tc := range []struct {
		name     string
		settings AgentSettings
	}{
		{name: "fleet-controller flag defaults", settings: flagDefaults},
		{name: "fleet chart default values", settings: chartDefaultAgentSettings},
		{name: "no settings", settings: AgentSettings{}},
	} {
		opts := Options{APIServerURL: "https://upstream.example:6443", APIServerCA: []byte("ca"), Agent: tc.settings}
		opts.Defaults()
		r := &ClusterReconciler{reconcilerBase: reconcilerBase{Opts: opts}}
		got, err := r.agentConfigHash(cluster)
		if err != nil {
			t.Fatal(err)
		}
		if got != defaultAgentConfigHash {
			objs, _ := AgentObjects(r.agentManifest(cluster, r.agentValues(cluster, apiServerOverride{})))
			b, _ := json.MarshalIndent(objs, "", "  ")
			t.Errorf("%s: agentConfigHash %s, recorded %s: every imported agent would be installed again on upgrade. The manifest now:\n%s",
				tc.name, got, defaultAgentConfigHash, b)
		}
	}
}
