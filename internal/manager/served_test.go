package manager

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestServesKind(t *testing.T) {
	old := &metav1.APIResourceList{APIResources: []metav1.APIResource{{Kind: "GitRepo", Name: "gitrepos"}, {Kind: "GitRepo", Name: "gitrepos/status"}}}
	if servesKind(old, "HelmOp") {
		t.Error("CRDs without HelmOp serve it")
	}
	cur := &metav1.APIResourceList{APIResources: append(old.APIResources, metav1.APIResource{Kind: "HelmOp", Name: "helmops"})}
	if !servesKind(cur, "HelmOp") {
		t.Error("CRDs with HelmOp do not serve it")
	}
}
