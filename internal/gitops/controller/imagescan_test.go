package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/gittest"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestImageScanFieldsAccepted: a Rancher Fleet GitRepo with image scan
// settings is accepted under strict field validation (kubectl's default),
// syncs, and says with a warning event that the settings are ignored.
func TestImageScanFieldsAccepted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "imagescan")
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "imagescan")
	c1 := repo.Commit("master", map[string]string{"app/cm.yaml": configMap("app", "v1")})
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scan"},
		Spec: fleet.GitRepoSpec{
			Repo:              srv.URLFor(repo),
			Paths:             []string{"app"},
			PollingInterval:   &metav1.Duration{Duration: time.Second},
			ImageScanInterval: &metav1.Duration{Duration: 5 * time.Minute},
			ImageScanCommit:   &fleet.CommitSpec{AuthorName: "bot", AuthorEmail: "bot@example.com", MessageTemplate: "update images"},
		},
	}
	if err := env.Client.Create(ctx, gr, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("strict create of a GitRepo with image scan settings: %v", err)
	}
	fleettest.Eventually(t, timeout, func() error {
		if r := getRepo(t, ns, "scan"); r.Status.Commit != c1 {
			return fmt.Errorf("commit %q, want %q", r.Status.Commit, c1)
		}
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "scan" && e.Type == "Warning" && e.Reason == "ImageScanUnsupported" {
				return nil
			}
		}
		return fmt.Errorf("no ImageScanUnsupported event")
	})
}
