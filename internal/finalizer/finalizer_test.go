package finalizer

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

const name = "example.com/cleanup"

func TestHandle(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
	c := fake.NewClientBuilder().WithObjects(cm).Build()

	// A live object gets the finalizer and reconciling goes on.
	got := &corev1.ConfigMap{}
	_ = c.Get(ctx, client.ObjectKeyFromObject(cm), got)
	deleting, err := Handle(ctx, c, got, name, func(context.Context) error { t.Fatal("no cleanup for a live object"); return nil })
	if deleting || err != nil {
		t.Fatalf("live object: deleting=%v err=%v", deleting, err)
	}
	_ = c.Get(ctx, client.ObjectKeyFromObject(cm), got)
	if !controllerutil.ContainsFinalizer(got, name) {
		t.Fatal("finalizer was not stored")
	}

	// A failed cleanup keeps the finalizer, so deletion is retried.
	_ = c.Delete(ctx, got)
	_ = c.Get(ctx, client.ObjectKeyFromObject(cm), got)
	deleting, err = Handle(ctx, c, got, name, func(context.Context) error { return errors.New("not yet") })
	if !deleting || err == nil {
		t.Fatalf("failed cleanup: deleting=%v err=%v", deleting, err)
	}
	_ = c.Get(ctx, client.ObjectKeyFromObject(cm), got)
	if !controllerutil.ContainsFinalizer(got, name) {
		t.Fatal("finalizer must stay after a failed cleanup")
	}

	// A successful cleanup releases the object.
	cleaned := false
	deleting, err = Handle(ctx, c, got, name, func(context.Context) error { cleaned = true; return nil })
	if !deleting || err != nil || !cleaned {
		t.Fatalf("cleanup: deleting=%v err=%v cleaned=%v", deleting, err, cleaned)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err == nil {
		t.Fatal("object should be gone once its last finalizer is removed")
	}
}
