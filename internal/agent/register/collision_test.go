package register

import (
	"context"
	"errors"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestRegistrationNameTaken: the registration name is a short hash of the
// request's random value and clientID, so another agent's request may hold
// it already. The registration token may not read registrations, so the
// agent cannot look; but the first create of a request that finds the name
// taken cannot have met its own request: the agent files its request under
// a new name instead of waiting for, and being handed, the other agent's
// credential. Retries with the same random value continue that request.
func TestRegistrationNameTaken(t *testing.T) {
	up := upstream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, sa = "collision", "import-token"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(up.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))
	// The registration token's permission (as the manager grants it).
	must(up.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{fleet.GroupVersion.Group}, Resources: []string{"clusterregistrations"}, Verbs: []string{"create"}}}}))
	must(up.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}))
	tr := &authv1.TokenRequest{}
	must(up.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}, tr))

	const clientID = "mine"
	random := NewClientRandom()
	taken := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: registrationName(clientID, random), Namespace: ns},
		Spec: fleet.ClusterRegistrationSpec{ClientID: "another-cluster", ClientRandom: "another-random"}}
	must(up.Client.Create(ctx, taken))

	b := &Bootstrap{APIServerURL: up.Config.Host, APIServerCA: up.Config.CAData, Token: tr.Status.Token, TokenName: "tok",
		ClusterNamespace: ns, SystemRegistrationNamespace: ns}
	opts := Options{PollInterval: 100 * time.Millisecond, Timeout: 2 * time.Second, ClientRandom: random}
	own := func() []fleet.ClusterRegistration {
		t.Helper()
		var list fleet.ClusterRegistrationList
		must(up.Client.List(ctx, &list, client.InNamespace(ns)))
		var out []fleet.ClusterRegistration
		for _, r := range list.Items {
			if r.Spec.ClientID == clientID {
				out = append(out, r)
			}
		}
		return out
	}
	for attempt := 1; attempt <= 2; attempt++ {
		// Nobody grants here: each attempt ends when its wait does.
		_, err := Register(ctx, opts, b, AgentConfig{ClientID: clientID})
		if err == nil || errors.Is(err, ErrRefused) {
			t.Fatalf("attempt %d: want the wait for the grant to time out, got %v", attempt, err)
		}
		mine := own()
		if len(mine) != 1 {
			t.Fatalf("attempt %d: want one request of this agent, got %d", attempt, len(mine))
		}
		if mine[0].Name == taken.Name || mine[0].Spec.ClientRandom == "another-random" {
			t.Fatalf("attempt %d: the agent took over the other agent's request %s", attempt, taken.Name)
		}
	}
	got := &fleet.ClusterRegistration{}
	must(up.Client.Get(ctx, client.ObjectKeyFromObject(taken), got))
	if got.Spec.ClientID != "another-cluster" {
		t.Errorf("the other agent's request was changed: %+v", got.Spec)
	}
}
