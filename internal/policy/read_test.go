package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestRead covers the three answers a controller must tell apart: none
// (no reader, or CRDs that predate Policies), the namespace's Policies
// (and only that namespace's), and a read error that must be retried
// rather than treated as "no Policies" (which would fail open).
func TestRead(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleet.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	requireSA := func(ns string) *fleet.Policy {
		return &fleet.Policy{
			ObjectMeta:            metav1.ObjectMeta{Name: "p", Namespace: ns},
			RequireServiceAccount: true,
		}
	}
	listFails := func(err error) interceptor.Funcs {
		return interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return err }}
	}
	noMatch := &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: fleet.GroupVersion.Group, Kind: "Policy"}}

	for _, tc := range []struct {
		name      string
		reader    client.Reader
		wantEmpty bool
		wantErr   string
	}{
		{name: "nil reader", reader: nil, wantEmpty: true},
		{name: "CRD not served", reader: fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(listFails(noMatch)).Build(), wantEmpty: true},
		{name: "other namespace only", reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(requireSA("other")).Build(), wantEmpty: true},
		{name: "own namespace", reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(requireSA("team")).Build(), wantEmpty: false},
		{name: "read error", reader: fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(listFails(errors.New("connection refused"))).Build(), wantErr: "reading Policies: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(context.Background(), tc.reader, "team")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Empty() != tc.wantEmpty {
				t.Fatalf("Empty() = %v, want %v", got.Empty(), tc.wantEmpty)
			}
			if !tc.wantEmpty && got.CheckServiceAccount("") == nil {
				t.Fatal("the namespace's Policy requires a service account, but an empty one was accepted")
			}
		})
	}
}
