package install_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/cli"
	"github.com/fleetgo/fleet/internal/install"
)

// fleetCLI runs the fleet command in-process and returns its stdout.
func fleetCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestInstallControllerOutputAppliesToFreshCluster(t *testing.T) {
	ctx := context.Background()
	crdsOnly, err := fleetCLI(t, "install", "controller", "--crds-only")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(crdsOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(crdNames(t)) {
		t.Fatalf("--crds-only printed %d objects, want %d CRDs", len(objs), len(crdNames(t)))
	}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Fatalf("--crds-only printed a %s", o.GetKind())
		}
	}

	// No kubeconfig is needed: point it at a file that does not exist.
	full, err := fleetCLI(t, "--kubeconfig", "/nonexistent/kubeconfig", "install", "controller",
		"--controller-image", "registry.example:5000/fleet/controller:v9", "--agent-image", "registry.example:5000/fleet/agent:v9")
	if err != nil {
		t.Fatal(err)
	}
	objs, err = install.Objects(full)
	if err != nil {
		t.Fatal(err)
	}
	// `kubectl apply -f -` equivalent.
	if err := install.Apply(ctx, fresh.Client, objs); err != nil {
		t.Fatal(err)
	}
	waitCRDsEstablished(t, fresh.Client)
	dep := &appsv1.Deployment{}
	if err := fresh.Client.Get(ctx, client.ObjectKey{Namespace: "cattle-fleet-system", Name: "fleet-controller"}, dep); err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != "registry.example:5000/fleet/controller:v9" {
		t.Fatalf("controller image %q", img)
	}
	cm := &corev1.ConfigMap{}
	if err := fresh.Client.Get(ctx, client.ObjectKey{Namespace: "cattle-fleet-system", Name: "fleet-controller"}, cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data["config"], `"agentImage":"registry.example:5000/fleet/agent:v9"`) {
		t.Fatalf("controller config %s", cm.Data["config"])
	}
	// Applying it again (an upgrade with the same manifests) works too.
	if err := install.Apply(ctx, fresh.Client, objs); err != nil {
		t.Fatal(err)
	}
}

func TestInstallAgentConfigOutput(t *testing.T) {
	ctx := context.Background()
	out, err := fleetCLI(t, "install", "agent-config", "-l", "env=prod", "-l", "team=a,tier=1", "--system-namespace", "agent-config-check")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := install.Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := install.Apply(ctx, fresh.Client, objs); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := fresh.Client.Get(ctx, client.ObjectKey{Namespace: "agent-config-check", Name: "fleet-agent"}, cm); err != nil {
		t.Fatal(err)
	}
	var cfg install.AgentConfig
	if err := json.Unmarshal([]byte(cm.Data["config"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Labels) != 3 || cfg.Labels["env"] != "prod" || cfg.Labels["team"] != "a" || cfg.Labels["tier"] != "1" {
		t.Fatalf("labels %v", cfg.Labels)
	}
	for _, bad := range []string{"noequals", "bad key=v", "k=bad value"} {
		if _, err := fleetCLI(t, "install", "agent-config", "-l", bad); err == nil {
			t.Fatalf("label %q was accepted", bad)
		}
	}
}
