package v1alpha1_test

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Typed Go values cannot hold an unparsable duration, so these helpers build
// raw objects the way a user's YAML arrives at the API server.

func rawToken(namespace, name, ttl string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "fleet.cattle.io/v1alpha1",
		"kind":       "ClusterRegistrationToken",
		"metadata":   map[string]interface{}{"name": name, "namespace": namespace},
		"spec":       map[string]interface{}{"ttl": ttl},
	}}
}

func rawGitRepo(namespace, name, interval string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "fleet.cattle.io/v1alpha1",
		"kind":       "GitRepo",
		"metadata":   map[string]interface{}{"name": name, "namespace": namespace},
		"spec":       map[string]interface{}{"repo": "https://example.com/r.git", "pollingInterval": interval},
	}}
}
