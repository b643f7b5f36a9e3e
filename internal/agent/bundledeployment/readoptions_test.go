package bundledeployment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Which failures to read a values Secret wait like an unreadable Content
// (*ContentUnavailableError naming the Secret) and which are errors the
// deploy backs off from, as before.
func TestReadOptionsValuesSecret(t *testing.T) {
	raw := []byte(`{"a":"1"}`)
	sum := sha256.Sum256(raw)
	bd := &fleet.BundleDeployment{}
	bd.Name, bd.Namespace = "app", "cluster-ns"
	bd.Spec.ValuesHash = hex.EncodeToString(sum[:])
	secrets := schema.GroupResource{Resource: "secrets"}
	tests := []struct {
		name        string
		err         error
		data        []byte
		unavailable string // cause, when waited for
		wantErr     string
	}{
		{name: "read", data: raw},
		{name: "429", err: apierrors.NewTooManyRequests("busy", 0), unavailable: "429"},
		{name: "503", err: apierrors.NewServiceUnavailable("down"), unavailable: "503"},
		{name: "404", err: apierrors.NewNotFound(secrets, "app"), wantErr: "reading values secret app"},
		{name: "403", err: apierrors.NewForbidden(secrets, "app", errors.New("no")), wantErr: "reading values secret app"},
		{name: "hash", data: []byte(`{"a":"2"}`), wantErr: "does not match valuesHash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := ReadOptions(context.Background(), bd, func(s *corev1.Secret) error {
				s.Data = map[string][]byte{"values": tt.data}
				return tt.err
			})
			var unavailable *ContentUnavailableError
			switch {
			case tt.unavailable != "":
				if !errors.As(err, &unavailable) || unavailable.Kind != KindValuesSecret ||
					!strings.Contains(err.Error(), "values Secret app") || !strings.Contains(err.Error(), tt.unavailable) {
					t.Fatalf("error %v, want the values Secret waited for (%s)", err, tt.unavailable)
				}
			case tt.wantErr != "":
				if err == nil || errors.As(err, &unavailable) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want a failure with %q", err, tt.wantErr)
				}
			case err != nil || opts.Helm == nil || opts.Helm.Values.Data["a"] != "1":
				t.Fatalf("options %+v, error %v", opts.Helm, err)
			}
		})
	}
}
