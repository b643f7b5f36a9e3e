package registration_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/fleetgo/fleet/charts"
	"github.com/fleetgo/fleet/internal/install"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestTokenValuesCarryCheckinInterval: a token's values carry the manager's
// agentCheckinInterval (5m in the manager of optsWorkspace, the 15m default
// in the shared one), and the fleet-agent chart installed with those values
// runs the agent with it, unless the chart's own checkinInterval is set,
// whichever values file comes last. Without it a chart-installed agent
// checked in every 15m whatever the manager expected, and went Offline
// between check-ins under a manager set to 5m.
func TestTokenValuesCarryCheckinInterval(t *testing.T) {
	if optsManager.AgentCheckinInterval != 5*time.Minute {
		t.Fatal("the manager of optsWorkspace must have agentCheckinInterval 5m")
	}
	for _, tc := range []struct {
		name, ns, want string
	}{
		{name: "explicit 5m", ns: optsWorkspace, want: "5m0s"},
		{name: "the default", ns: workspace, want: "15m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newToken(t, tc.ns, "interval-"+tc.ns, time.Hour)
			if got := v.Internal[registration.ValuesCheckinInterval]; got != tc.want {
				t.Fatalf("values internal.checkinInterval = %q, want %q", got, tc.want)
			}
			values := tokenValues(t, tc.ns, "interval-"+tc.ns)
			if got := agentCheckinEnv(t, values); got != tc.want {
				t.Errorf("the chart with the token's values runs the agent with CHECKIN_INTERVAL %q, want %q", got, tc.want)
			}
			// The user's checkinInterval wins: it is another key than
			// the token's, so the order of the values files does not
			// matter.
			values["checkinInterval"] = "1h"
			if got := agentCheckinEnv(t, values); got != "1h" {
				t.Errorf("with checkinInterval 1h the agent runs with CHECKIN_INTERVAL %q", got)
			}
		})
	}
}

// tokenValues is the values.yaml of token ns/name as a user passes it to
// helm.
func tokenValues(t *testing.T, ns, name string) map[string]any {
	t.Helper()
	s := &corev1.Secret{}
	if err := up.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(s.Data["values"], &values); err != nil {
		t.Fatal(err)
	}
	return values
}

// agentCheckinEnv renders the fleet-agent chart with values and returns
// the CHECKIN_INTERVAL of the agent container ("" when unset).
func agentCheckinEnv(t *testing.T, values map[string]any) string {
	t.Helper()
	out, err := install.Render(charts.Agent, install.RenderOptions{ReleaseName: "fleet-agent", Namespace: "cattle-fleet-system", Values: values})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
			for _, e := range env {
				if m := e.(map[string]any); m["name"] == "CHECKIN_INTERVAL" {
					s, _ := m["value"].(string)
					return s
				}
			}
		}
	}
	return ""
}
