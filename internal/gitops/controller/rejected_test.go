package controller_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestRejectedBundleStallsGitRepo: the GitRepo syncs, but the Bundle
// controller rejects its Bundle whole (an invalid clusterSelector in the
// GitRepo's targets); the GitRepo shows that error (Ready=False,
// Stalled=True, display Error), not "waiting for 1 bundle(s)" forever. (A
// repo no GitRepoRestriction allows is refused before it is synced:
// TestRestrictedRepoIsNeverContacted.)
func TestRejectedBundleStallsGitRepo(t *testing.T) {
	ns := newNamespace(t, "rejected")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "rejected")
	repo.Commit("main", map[string]string{"cm.yaml": configMap("r", "1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	createRepo(t, ns, "rejected", fleet.GitRepoSpec{Repo: srv.URLFor(repo), Branch: "main", Targets: []fleet.GitTarget{
		{Name: "bad", ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}},
	}})

	fleettest.Eventually(t, timeout, func() error {
		r := getRepo(t, ns, "rejected")
		ready, stalled := condition(r, fleet.ConditionReady), condition(r, fleet.ConditionStalled)
		if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "bad key!") {
			return fmt.Errorf("ready %+v", ready)
		}
		if stalled == nil || stalled.Status != metav1.ConditionTrue {
			return fmt.Errorf("stalled %+v", stalled)
		}
		if r.Status.Display.State != "Error" || !r.Status.Display.Error {
			return fmt.Errorf("display %+v", r.Status.Display)
		}
		return nil
	})
}
