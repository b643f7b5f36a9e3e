package cli

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/target"
)

// A cluster registration has not processed yet is left out of the
// Bundle's errors; `fleet target` still lists it, as pending, with why.
func TestPreviewRowsListPendingClusters(t *testing.T) {
	b := &fleet.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "app"}}
	c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-default", Name: "fresh"}}
	p := &bundle.Preview{
		Rollout: &target.Result{},
		Pending: []*target.Target{{Cluster: c, Pending: true, Err: errors.New("cluster has no namespace yet")}},
	}
	rows := previewRows(b, p)
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want one for the pending cluster", rows)
	}
	r := rows[0]
	if r.Cluster != "fleet-default/fresh" || r.Action != "pending registration (left as is)" || r.Error != "cluster has no namespace yet" {
		t.Fatalf("row %+v", r)
	}
}
