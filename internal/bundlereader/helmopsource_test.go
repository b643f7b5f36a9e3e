package bundlereader

import (
	"context"
	"errors"
	"strings"
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestReadHelmOpChartForms: a HelmOp chart that is a local path is a spec
// error whose message lists every form a HelmOp accepts, so the user can
// fix it without the docs; a GitHub shorthand, one of those forms, is read
// from git (here with a cancelled context, so nothing leaves the machine),
// not refused as a local path.
func TestReadHelmOpChartForms(t *testing.T) {
	read := func(ctx context.Context, chart string) error {
		_, err := ReadHelmOp(ctx, "op", &fleet.BundleSpec{BundleDeploymentOptions: fleet.BundleDeploymentOptions{
			Helm: &fleet.HelmOptions{Chart: chart},
		}}, Options{})
		return err
	}
	err := read(context.Background(), "./charts/db")
	if !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("local chart: err = %v, want ErrInvalidSpec", err)
	}
	for _, form := range []string{"spec.helm.repo", "oci://", "http(s)://", "git::", "github.com/", "gitlab.com/", "bitbucket.org/"} {
		if !strings.Contains(err.Error(), form) {
			t.Errorf("local chart: %q does not mention %s", err, form)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = read(ctx, "github.com/org/repo//charts/app?ref=v1")
	if err == nil || errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "https://github.com/org/repo.git") {
		t.Errorf("shorthand: err = %v, want a git error for https://github.com/org/repo.git", err)
	}
}
