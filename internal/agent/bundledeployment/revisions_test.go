package bundledeployment_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// secretWrites keeps the release Secret writes of a request log.
func secretWrites(seen []string, ns string) []string {
	var out []string
	for _, r := range seen {
		method, path, _ := strings.Cut(r, " ")
		if method != "GET" && strings.HasPrefix(path, "/api/v1/namespaces/"+ns+"/secrets") {
			out = append(out, method)
		}
	}
	slices.Sort(out)
	return out
}

// history is releaseHistory as "version:status", oldest first.
func history(t *testing.T, ns, name string) []string {
	t.Helper()
	var out []string
	for _, r := range releaseHistory(t, ns, name) {
		out = append(out, fmt.Sprintf("%d:%s", r.Version, r.Info.Status))
	}
	return out
}

// A deploy that does not wait for readiness writes each revision once,
// finished, instead of pending and then finished: an install writes one
// Secret and an upgrade two (the new revision, and the old one
// superseded). Helm reads the same history as from its own writes, a
// failed upgrade is recorded as failed, and a deploy that waits still
// records its revision as pending first.
func TestReleaseRevisionWrittenOnce(t *testing.T) {
	ctx := context.Background()
	var log requestLog
	dep, err := deployer.New(log.config(), agentNS)
	must(t, err)
	const ns, name = "revisions", "revisions"
	// All history kept, to read it whole.
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{MaxHistory: 10}}
	deploy := func(m string, opts fleet.BundleDeploymentOptions) error {
		log.reset()
		_, err := dep.Deploy(ctx, deployer.Input{Name: name, Manifest: configMaps(m), Options: opts})
		return err
	}
	step := func(what string, err error, wantWrites, wantHistory []string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := secretWrites(log.reset(), ns); !slices.Equal(got, wantWrites) {
			t.Errorf("%s: release Secret writes %v, want %v", what, got, wantWrites)
		}
		if got := history(t, ns, name); !slices.Equal(got, wantHistory) {
			t.Errorf("%s: history %v, want %v", what, got, wantHistory)
		}
	}

	step("install", deploy("metadata:\n  name: app\ndata:\n  x: \"1\"\n", opts),
		[]string{"POST"}, []string{"1:deployed"})
	step("upgrade", deploy("metadata:\n  name: app\ndata:\n  x: \"2\"\n", opts),
		[]string{"POST", "PUT"}, []string{"1:superseded", "2:deployed"})

	// The API server refuses the new manifest: the revision is recorded
	// failed, the deployed one stays deployed (Helm records it again).
	err = deploy("metadata:\n  name: Not_A_Name\ndata:\n  x: \"3\"\n", opts)
	if err == nil {
		t.Fatal("an upgrade to an invalid object succeeded")
	}
	step("failed upgrade", nil, []string{"POST", "PUT"}, []string{"1:superseded", "2:deployed", "3:failed"})
	if cm, err := configMap(t, ns, "app"); err != nil || cm.Data["x"] != "2" {
		t.Errorf("after the failed upgrade: %v, %v", cm, err)
	}

	// Waiting for readiness (timeoutSeconds): Helm's own three writes,
	// the revision stored as pending while it waits.
	waiting := opts
	waiting.Helm = &fleet.HelmOptions{MaxHistory: 10, TimeoutSeconds: 30}
	step("waiting upgrade", deploy("metadata:\n  name: app\ndata:\n  x: \"4\"\n", waiting),
		[]string{"POST", "PUT", "PUT"}, []string{"1:superseded", "2:superseded", "3:failed", "4:deployed"})
}

// A bundle with a hook: the hook runs on install and on upgrade, and the
// revisions Helm reads back carry the hook's run (the held revision is
// written when the hook starts, and again when the release is done).
func TestHookRunsAndIsRecorded(t *testing.T) {
	ctx := context.Background()
	dep, err := deployer.New(down.Config, agentNS)
	must(t, err)
	const ns, name = "hooks", "hooks"
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{MaxHistory: 10}}
	hook := func(rev string) string {
		return "metadata:\n  name: hook\n  annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n" +
			"    helm.sh/hook-delete-policy: before-hook-creation\ndata:\n  rev: \"" + rev + "\"\n"
	}
	for _, rev := range []string{"1", "2"} {
		m := configMaps("metadata:\n  name: app\ndata:\n  rev: \""+rev+"\"\n", hook(rev))
		if _, err := dep.Deploy(ctx, deployer.Input{Name: name, Manifest: m, Options: opts}); err != nil {
			t.Fatalf("revision %s: %v", rev, err)
		}
		for _, cm := range []string{"app", "hook"} {
			if got, err := configMap(t, ns, cm); err != nil || got.Data["rev"] != rev {
				t.Errorf("revision %s: ConfigMap %s: %v, %v", rev, cm, got, err)
			}
		}
		r, err := driver.NewSecrets(down.Clientset.CoreV1().Secrets(ns)).Get("sh.helm.release.v1." + name + ".v" + rev)
		if err != nil {
			t.Fatalf("revision %s: reading it as Helm: %v", rev, err)
		}
		rel := r.(*release.Release)
		if rel.Info.Status != "deployed" || len(rel.Hooks) != 1 || rel.Hooks[0].LastRun.Phase != release.HookPhaseSucceeded {
			t.Errorf("revision %s: status %s, hooks %+v", rev, rel.Info.Status, rel.Hooks)
		}
	}
	if got := history(t, ns, name); !slices.Equal(got, []string{"1:superseded", "2:deployed"}) {
		t.Errorf("history %v", got)
	}
}
