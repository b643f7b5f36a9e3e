package deployer

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// NamespaceKeptReason is the reason of the Warning Event recorded on a
// namespace that deleteNamespace asked to delete and that was kept.
const NamespaceKeptReason = "NamespaceKept"

// warnNamespaceKept records why a namespace deleteNamespace asked to delete
// is still there, as a Warning Event about it, with the agent's own
// identity, which may write Events where the bundle's serviceAccount may
// not. The release being gone, nothing retries the delete, so a log line
// alone would be the only trace. The Event is stored in the kept namespace
// (its involvedObject.namespace says so, as the API server requires),
// not in default as Events of cluster-scoped objects usually are: `kubectl
// describe namespace` shows no Events, `kubectl get events -n ns` does,
// and it goes with the namespace. Failing to record it is logged, never an
// error.
func (d *Deployer) warnNamespaceKept(ctx context.Context, ns, message string) {
	log := crlog.FromContext(ctx).WithValues("namespace", ns)
	n, err := d.core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		log.Error(err, "recording why the namespace was kept", "reason", message)
		return
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: ns + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Namespace", Namespace: ns, Name: ns, UID: n.UID,
			ResourceVersion: n.ResourceVersion,
		},
		Type: corev1.EventTypeWarning, Reason: NamespaceKeptReason, Message: message,
		Source:         corev1.EventSource{Component: FieldManager},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := d.core.Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		log.Error(err, "recording why the namespace was kept", "reason", message)
	}
}
