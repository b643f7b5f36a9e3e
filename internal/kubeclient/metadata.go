package kubeclient

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// MetadataOf is an empty metadata-only object of kind gvk, for the
// metadata watches and reads that keep Secrets' data and Contents'
// payloads out of the manager's memory (its size at thousands of
// clusters, and credentials in the process's heap): controllers that
// watch the same kind this way share one informer.
func MetadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}
