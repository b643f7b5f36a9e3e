package registration

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestAgentConfigHashFollowsKubeconfigSecret: the apiServerURL and
// apiServerCA of a cluster's kubeconfig Secret replace the manager's in
// the agent it installs, so each moves the hash (a changed Secret
// reinstalls the agent); a Secret that repeats the manager's values
// changes nothing, so that the local cluster's Secret (which always holds
// them) or a Secret that only spells them out does not reinstall agents.
func TestAgentConfigHashFollowsKubeconfigSecret(t *testing.T) {
	opts := Options{APIServerURL: "https://up:6443", APIServerCA: []byte("ca"), AgentImage: "ghcr.io/fleetgo/fleet-agent:v1"}
	opts.Defaults()
	r := &ClusterReconciler{reconcilerBase: reconcilerBase{Opts: opts}}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ws"},
		Spec: fleet.ClusterSpec{ClientID: "id", KubeConfigSecret: "kc"}}
	hash := func(o apiServerOverride) string {
		t.Helper()
		h, err := r.agentConfigHashWith(c, o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	none := hash(apiServerOverride{})
	if h, err := r.agentConfigHash(c); err != nil || h != none {
		t.Fatalf("agentConfigHash = %q, %v; want the hash without a Secret override %q", h, err, none)
	}
	if hash(apiServerOverride{url: opts.APIServerURL, ca: string(opts.APIServerCA)}) != none {
		t.Error("a Secret repeating the manager's URL and CA changes the hash: it would reinstall the agent")
	}
	seen := map[string]string{"none": none}
	for name, o := range map[string]apiServerOverride{
		"url":        {url: "https://fleet.example.com:6443"},
		"other url":  {url: "https://fleet.example.org:6443"},
		"ca":         {ca: "other ca"},
		"url and ca": {url: "https://fleet.example.com:6443", ca: "other ca"},
	} {
		h := hash(o)
		for other, oh := range seen {
			if h == oh {
				t.Errorf("Secret override %s hashes like %s", name, other)
			}
		}
		seen[name] = h
	}
}
