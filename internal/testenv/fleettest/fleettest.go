// Package fleettest has the steps many integration tests share: registering a
// downstream cluster the way a user does (token → values → bootstrap objects
// downstream), running its agent and waiting for it to check in, and
// running the fleet CLI in-process.
package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Bootstrap names the token and the registration-time labels.
type Bootstrap struct {
	// Workspace is the namespace of the token and of the Cluster.
	Workspace string
	// TokenName is the ClusterRegistrationToken to create.
	TokenName string
	// Labels are given to the Cluster when it is created.
	Labels map[string]string
	// Timeout bounds each wait (default 60s).
	Timeout time.Duration
}

// InstallBootstrap creates a ClusterRegistrationToken upstream, waits for its
// values and writes them downstream exactly as the fleet-agent chart does:
// Secret fleet-agent-bootstrap and ConfigMap fleet-agent (with the labels) in
// cattle-fleet-system. The agent can then be started against downstream.
func InstallBootstrap(ctx context.Context, up, down client.Client, b Bootstrap) error {
	if b.Timeout == 0 {
		b.Timeout = 60 * time.Second
	}
	tok := &fleet.ClusterRegistrationToken{
		ObjectMeta: metav1.ObjectMeta{Name: b.TokenName, Namespace: b.Workspace},
		Spec:       fleet.ClusterRegistrationTokenSpec{TTL: &metav1.Duration{Duration: time.Hour}},
	}
	if err := up.Create(ctx, tok); err != nil {
		return fmt.Errorf("creating token: %w", err)
	}
	values := map[string]interface{}{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, b.Timeout, true, func(ctx context.Context) (bool, error) {
		s := &corev1.Secret{}
		if err := up.Get(ctx, client.ObjectKey{Namespace: b.Workspace, Name: b.TokenName}, s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if err := yaml.Unmarshal(s.Data["values"], &values); err != nil {
			return false, err
		}
		_, ok := values["token"]
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the token's values: %w", err)
	}
	str := func(k string) string { s, _ := values[k].(string); return s }
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultSystemNamespace}}
	if err := down.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := down.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent-bootstrap", Namespace: fleet.DefaultSystemNamespace},
		StringData: map[string]string{
			"apiServerURL": str("apiServerURL"), "apiServerCA": str("apiServerCA"), "token": str("token"),
			"tokenName": str("tokenName"), "clusterNamespace": str("clusterNamespace"),
			"systemRegistrationNamespace": str("systemRegistrationNamespace"),
		},
	}); err != nil {
		return fmt.Errorf("creating the bootstrap secret: %w", err)
	}
	cfg, err := json.Marshal(map[string]interface{}{"labels": b.Labels})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-agent", Namespace: fleet.DefaultSystemNamespace},
		Data:       map[string]string{"config": string(cfg)},
	}
	if err := down.Create(ctx, cm); err != nil {
		return fmt.Errorf("creating the agent config: %w", err)
	}
	return nil
}

// WaitForCluster waits until exactly one Cluster with labels in workspace has
// its namespace and has checked in, and returns it.
func WaitForCluster(ctx context.Context, up client.Client, workspace string, labels map[string]string, timeout time.Duration) (fleet.Cluster, error) {
	var cluster fleet.Cluster
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list := &fleet.ClusterList{}
		if err := up.List(ctx, list, client.InNamespace(workspace), client.MatchingLabels(labels)); err != nil {
			return false, err
		}
		if len(list.Items) != 1 {
			last = fmt.Sprintf("%d clusters match", len(list.Items))
			return false, nil
		}
		cluster = list.Items[0]
		last = fmt.Sprintf("cluster %s: namespace %q, lastSeen %v", cluster.Name, cluster.Status.Namespace, cluster.Status.Agent.LastSeen)
		return cluster.Status.Namespace != "" && !cluster.Status.Agent.LastSeen.IsZero(), nil
	})
	if err != nil {
		return cluster, fmt.Errorf("waiting for a registered cluster (%s): %w", last, err)
	}
	return cluster, nil
}
