package testenv

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An etcd restarted by StopEtcd/StartEtcd is the same store: what was
// written before is still there, writes fail while it is down and work
// again after, and Stop leaves no etcd running.
func TestEtcdRestartKeepsData(t *testing.T) {
	c, err := Start(Options{Name: "etcd-restart", WithoutCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if err := c.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	url := c.EtcdURL()
	if c.APIServerPID() == 0 {
		t.Fatal("kube-apiserver process not found")
	}
	if err := c.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = c.Client.Create(short, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during", Namespace: "default"}})
	cancel()
	if err == nil {
		t.Fatal("a write succeeded while etcd was down")
	}
	if err := c.StartEtcd(); err != nil {
		t.Fatal(err)
	}
	if got := c.EtcdURL(); got != url {
		t.Fatalf("etcd came back at %s, not %s", got, url)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := &corev1.ConfigMap{}
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(cm), got)
		if err == nil {
			if got.Data["k"] != "v" {
				t.Fatalf("data changed: %v", got.Data)
			}
			if err = c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: "default"}}); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server did not recover after the etcd restart: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if pid := childPID("etcd", "--listen-client-urls="+url); pid != 0 {
		t.Fatalf("etcd %d still running after Stop", pid)
	}
}
