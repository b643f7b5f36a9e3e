package metrics

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestURLLabelsAreRedacted: credentials written into a GitRepo's repo or a
// HelmOp's repo or chart URL are not label values: /metrics is served
// without authentication.
func TestURLLabelsAreRedacted(t *testing.T) {
	r := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ws"},
		Spec: fleet.GitRepoSpec{Repo: "https://codecommit-user:AbC/dEf+gh1@git-codecommit.example.com/v1/repos/app"}}
	g := collect(t, func(e emitFunc) { gitRepoSamples(r, e) })
	if s := g["fleet_gitrepo_ready_clusters"]; len(s) != 1 || s[0].labels["repo"] != "https://***@git-codecommit.example.com/v1/repos/app" {
		t.Errorf("gitrepo samples = %+v", s)
	}
	op := &fleet.HelmOp{
		ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "ws"},
		Spec: fleet.HelmOpSpec{BundleSpec: fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			Helm: &fleet.HelmOptions{Repo: "https://ghp_SECRETTOKEN@charts.example.com", Chart: "git::https://u:s3cr3t@git.example.com/o/r//chart"}}}},
	}
	h := collect(t, func(e emitFunc) { helmOpSamples(op, e) })
	for metric, samples := range h {
		for _, s := range samples {
			for k, v := range s.labels {
				if strings.Contains(v, "SECRETTOKEN") || strings.Contains(v, "s3cr3t") {
					t.Errorf("%s: label %s=%q quotes a credential", metric, k, v)
				}
			}
			if s.labels["repo"] != "https://***@charts.example.com" || s.labels["chart"] != "git::https://***@git.example.com/o/r//chart" {
				t.Errorf("%s: labels %v", metric, s.labels)
			}
		}
	}
	if len(h) == 0 {
		t.Fatal("no HelmOp samples")
	}
}
