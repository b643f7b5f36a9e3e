package registration_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
)

// TestRetriedRegistrationContinuesItsRequest: an agent whose first attempt
// gave up right after filing its ClusterRegistration (a timeout in a
// registration burst) retries with the same ClientRandom. The retry must
// pick up that request, not file a second one for the manager to grant as
// well, and still end with a working credential.
func TestRetriedRegistrationContinuesItsRequest(t *testing.T) {
	values := newToken(t, workspace, "retry-token", time.Hour)
	b := &register.Bootstrap{APIServerURL: values.APIServerURL, APIServerCA: []byte(values.APIServerCA), Token: values.Token,
		TokenName: values.TokenName, ClusterNamespace: values.ClusterNamespace, SystemRegistrationNamespace: values.SystemRegistrationNamespace}
	cfg := register.AgentConfig{ClientID: "retry-client", Labels: map[string]string{"retry": "true"}}
	opts := register.Options{PollInterval: 200 * time.Millisecond, ClientRandom: register.NewClientRandom()}

	// The first attempt gives up almost at once (its request is filed, or
	// the attempt fails before; either way the retry must work).
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	first, firstErr := register.Register(short, opts, b, cfg)
	cancel()

	cred, err := register.Register(context.Background(), opts, b, cfg)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := register.Check(context.Background(), cred); err != nil {
		t.Fatalf("the retry's credential does not work: %v", err)
	}
	if firstErr == nil && first.ClusterName != cred.ClusterName {
		t.Errorf("first attempt got cluster %s, retry %s", first.ClusterName, cred.ClusterName)
	}
	regs := &fleet.ClusterRegistrationList{}
	if err := up.Client.List(context.Background(), regs, client.InNamespace(workspace)); err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, r := range regs.Items {
		if r.Spec.ClientID == cfg.ClientID {
			own = append(own, r.Name)
		}
	}
	if len(own) != 1 {
		t.Fatalf("want the retry to continue the one request, got ClusterRegistrations %v", own)
	}
	// A new value (after a success) files a new request.
	opts.ClientRandom = register.NewClientRandom()
	if _, err := register.Register(context.Background(), opts, b, cfg); err != nil {
		t.Fatalf("re-registration: %v", err)
	}
	if err := up.Client.List(context.Background(), regs, client.InNamespace(workspace)); err != nil {
		t.Fatal(err)
	}
	var again []string
	for _, r := range regs.Items {
		if r.Spec.ClientID == cfg.ClientID && r.Name != own[0] {
			again = append(again, r.Name)
		}
	}
	// (The manager may remove the granted earlier request meanwhile.)
	if len(again) != 1 {
		t.Errorf("a new ClientRandom must file a new request besides %s: got %v", own[0], again)
	}
}
