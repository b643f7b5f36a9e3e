package registration_test

import (
	"context"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// TestBootstrapAgentNamespaceFresh: a new Cluster "local" is created with
// bootstrap.agentNamespace, so that the importer never sees it without
// (the create, not only the apply after it, wrote the field), and a value
// that is no namespace name is not created with.
func TestBootstrapAgentNamespaceFresh(t *testing.T) {
	ctx := context.Background()
	for ns, agentNS := range map[string]string{"bootstrap-fresh": "cattle-local-agent", "bootstrap-fresh-bad": "Cattle_Local"} {
		newBootstrapNamespace(t, ns)
		opts := registration.Options{BootstrapNamespace: ns, BootstrapAgentNamespace: agentNS, SystemNamespace: "cattle-fleet-system"}
		if err := registration.EnsureLocalObjectsRecording(ctx, up.Client, opts, eventRecorder(t)); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
		cl := &fleet.Cluster{}
		if err := up.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}, cl); err != nil {
			t.Fatal(err)
		}
		want := agentNS
		if ns == "bootstrap-fresh-bad" {
			want = ""
		}
		if cl.Spec.AgentNamespace != want || createdWith(cl.ManagedFields, "agentNamespace") != (want != "") {
			t.Errorf("%s: cluster local spec.agentNamespace %q, created with it: %v; want %q, created with it: %v",
				ns, cl.Spec.AgentNamespace, createdWith(cl.ManagedFields, "agentNamespace"), want, want != "")
		}
	}
}

// TestBootstrapAgentNamespaceUnrecorded: the local agent installed by a
// version that did not record status.agentDeployedNamespace, known by the
// namespace it reports at check-in, is not moved by bootstrap.agentNamespace
// either: the value is left out with a Warning Event.
func TestBootstrapAgentNamespaceUnrecorded(t *testing.T) {
	ctx := context.Background()
	ns := "bootstrap-unrecorded"
	newBootstrapNamespace(t, ns)
	rec := eventRecorder(t)
	start := func(agentNS string) {
		t.Helper()
		opts := registration.Options{BootstrapNamespace: ns, BootstrapAgentNamespace: agentNS, SystemNamespace: "cattle-fleet-system"}
		if err := registration.EnsureLocalObjectsRecording(ctx, up.Client, opts, rec); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
	}
	key := client.ObjectKey{Namespace: ns, Name: fleet.LocalClusterName}
	start("")
	// As an older version left it: an install (hash) without the record,
	// and the namespace the agent reports.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl := &fleet.Cluster{}
		if err := up.Client.Get(ctx, key, cl); err != nil {
			return err
		}
		cl.Status.AgentConfigHash = "installed-before"
		cl.Status.Agent.Namespace = "cattle-fleet-system"
		return up.Client.Status().Update(ctx, cl)
	}); err != nil {
		t.Fatal(err)
	}
	start("cattle-local-agent")
	cl := &fleet.Cluster{}
	if err := up.Client.Get(ctx, key, cl); err != nil {
		t.Fatal(err)
	}
	if cl.Spec.AgentNamespace != "" {
		t.Errorf("cluster local spec.agentNamespace %q, want none: the agent runs in cattle-fleet-system", cl.Spec.AgentNamespace)
	}
	waitBootstrapWarning(t, ns, `bootstrap.agentNamespace "cattle-local-agent": left out, the local agent keeps running in namespace cattle-fleet-system`)
}

// createdWith says whether a write other than a server-side apply (the
// create) owns spec.<field> in managedFields.
func createdWith(managedFields []metav1.ManagedFieldsEntry, field string) bool {
	for _, e := range managedFields {
		if e.Operation != metav1.ManagedFieldsOperationUpdate || e.FieldsV1 == nil || e.Subresource != "" {
			continue
		}
		var fields struct {
			Spec map[string]any `json:"f:spec"`
		}
		if json.Unmarshal(e.FieldsV1.Raw, &fields) == nil && fields.Spec["f:"+field] != nil {
			return true
		}
	}
	return false
}
