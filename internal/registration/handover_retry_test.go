package registration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/names"
	"github.com/fleetgo/fleet/internal/testenv/fleettest"
)

// TestRetriedGrantHandsOverOnce: the manager wrote the hand-over Secret,
// then the API server refused the registration's status write (a policy,
// a conflict), so the grant runs again. The retry must not hand over a
// second credential: while the agent has not taken the Secret yet, the
// Secret stays the one the agent read (not a new token written over it);
// once the agent has taken it and deleted it, no new one appears (it would
// sit unread, with a live token, for RegistrationSecretTTL). Both agents'
// credentials work.
func TestRetriedGrantHandsOverOnce(t *testing.T) {
	ctx := context.Background()
	const tokenName = "handover-retry"
	refuseRegistrationStatus(t, tokenName)

	values := newToken(t, workspace, tokenName, time.Hour)
	b := &register.Bootstrap{APIServerURL: values.APIServerURL, APIServerCA: []byte(values.APIServerCA), Token: values.Token,
		TokenName: values.TokenName, ClusterNamespace: values.ClusterNamespace, SystemRegistrationNamespace: values.SystemRegistrationNamespace}
	const kept, taken = "handover-kept", "handover-taken"

	// Both agents register while the manager's status writes are refused:
	// each gets its credential from the Secret the first grant wrote. The
	// one agent gives the Secret back, as the agent does once it stored
	// the credential; the other has not got that far.
	creds := map[string]*register.Credential{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{kept, taken} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := register.Options{PollInterval: 200 * time.Millisecond, ClientRandom: register.NewClientRandom()}
			cred, err := register.Register(ctx, opts, b, register.AgentConfig{ClientID: id})
			if err == nil && id == taken {
				err = cred.ReleaseHandover(ctx)
			}
			if err != nil {
				t.Errorf("%s: %v", id, err)
				return
			}
			mu.Lock()
			creds[id] = cred
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { _ = creds[kept].ReleaseHandover(context.Background()) })
	for _, id := range []string{kept, taken} {
		if regs := registrationsOf(t, id); len(regs) != 1 || regs[0].Status.Granted {
			t.Fatalf("%s: want one registration whose granted status was refused, got %d (%+v)", id, len(regs), regs)
		}
	}

	// The status write goes through on a later retry.
	liftRefusal(t)
	for _, id := range []string{kept, taken} {
		eventually(t, id+" granted", func() error {
			if regs := registrationsOf(t, id); len(regs) != 1 || !regs[0].Status.Granted {
				return fmt.Errorf("registrations %+v", regs)
			}
			return nil
		})
	}

	// The granted status is written after the hand-over, so whatever the
	// retry handed over is there by now.
	if s := handoverSecrets(t, kept); len(s) != 1 {
		t.Errorf("%s: want exactly the one hand-over Secret, got %d", kept, len(s))
	} else if string(s[0].Data["token"]) != creds[kept].Token() {
		t.Errorf("%s: the retry wrote a second token over the hand-over Secret the agent read", kept)
	}
	if s := handoverSecrets(t, taken); len(s) != 0 {
		t.Errorf("%s: the agent took and deleted its hand-over Secret, but the retry wrote %d new one(s)", taken, len(s))
	}
	for _, id := range []string{kept, taken} {
		if err := register.Check(ctx, creds[id]); err != nil {
			t.Errorf("%s: the handed-over credential cannot read its own namespace: %v", id, err)
		}
	}
}

// TestRegrantReplacesOnlyAStaleHandover: a registration whose granted
// status was lost (reset here) is granted again while its hand-over Secret
// still waits for the agent. The grant keeps a Secret that still holds
// the registration's working credential (the agent may be reading it), and
// replaces one that does not (a garbled token here) with a working one,
// in the same Secret.
func TestRegrantReplacesOnlyAStaleHandover(t *testing.T) {
	ctx := context.Background()
	const clientID = "handover-regrant"
	values := newToken(t, workspace, "handover-regrant", time.Hour)
	b := &register.Bootstrap{APIServerURL: values.APIServerURL, APIServerCA: []byte(values.APIServerCA), Token: values.Token,
		TokenName: values.TokenName, ClusterNamespace: values.ClusterNamespace, SystemRegistrationNamespace: values.SystemRegistrationNamespace}
	opts := register.Options{PollInterval: 200 * time.Millisecond, ClientRandom: register.NewClientRandom()}
	cred, err := register.Register(ctx, opts, b, register.AgentConfig{ClientID: clientID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cred.ReleaseHandover(context.Background()) })

	regrant := func() corev1.Secret {
		t.Helper()
		regs := registrationsOf(t, clientID)
		if len(regs) != 1 {
			t.Fatalf("registrations: %d", len(regs))
		}
		reg := regs[0]
		reg.Status = fleet.ClusterRegistrationStatus{}
		if err := up.Client.Status().Update(ctx, &reg); err != nil {
			t.Fatal(err)
		}
		// A change of its Cluster wakes a registration that is not granted.
		n := 0
		eventually(t, "granted again", func() error {
			n++
			patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"test-poke":"%d"}}}`, n))
			c := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: workspace, Name: names.ClusterNameForClientID(clientID)}}
			if err := up.Client.Patch(ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return err
			}
			if err := up.Client.Get(ctx, client.ObjectKeyFromObject(&reg), &reg); err != nil || !reg.Status.Granted {
				return fmt.Errorf("not granted (%v)", err)
			}
			return nil
		})
		s := handoverSecrets(t, clientID)
		if len(s) != 1 {
			t.Fatalf("want the one hand-over Secret, got %d", len(s))
		}
		return s[0]
	}

	if s := regrant(); string(s.Data["token"]) != cred.Token() {
		t.Errorf("the grant replaced a hand-over Secret that still held the agent's working credential")
	}

	s := handoverSecrets(t, clientID)[0]
	s.Data["token"] = []byte("garbled")
	if err := up.Client.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	s = regrant()
	if string(s.Data["token"]) == "garbled" {
		t.Fatalf("the grant handed over the garbled Secret again")
	}
	cfg := tokenConfig(values)
	cfg.BearerToken = string(s.Data["token"])
	err = clientFor(t, cfg).List(ctx, &fleet.BundleDeploymentList{}, client.InNamespace(string(s.Data["deploymentNamespace"])))
	if err != nil {
		t.Errorf("the replaced hand-over credential cannot read its own namespace: %v", err)
	}
}

// handoverSecrets lists the hand-over Secrets written for the cluster of
// clientID.
func handoverSecrets(t *testing.T, clientID string) []corev1.Secret {
	t.Helper()
	var list corev1.SecretList
	if err := up.Client.List(context.Background(), &list, client.InNamespace(fleet.DefaultSystemRegistrationNamespace),
		client.MatchingLabels{fleet.ClusterLabel: names.ClusterNameForClientID(clientID)}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Secret
	for _, s := range list.Items {
		if s.Type == fleet.SecretTypeAgentCredential {
			out = append(out, s)
		}
	}
	return out
}

const refusalName = "refuse-registration-status"

// refuseRegistrationStatus makes the API server refuse status writes of
// the ClusterRegistrations made with tokenName, until liftRefusal, and
// returns once the refusal is in force.
func refuseRegistrationStatus(t *testing.T, tokenName string) {
	t.Helper()
	ctx := context.Background()
	label := fleet.RegistrationTokenLabel
	policy, binding := fleettest.Denial{
		Name: refusalName, Operation: admissionv1.Update, Resource: "clusterregistrations/status",
		Allow: fmt.Sprintf("!has(object.metadata.labels) || !('%s' in object.metadata.labels) || object.metadata.labels['%s'] != '%s'",
			label, label, tokenName),
		Message: "registration status writes refused for this test",
	}.Objects()
	for _, o := range []client.Object{policy, binding} {
		if err := up.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { liftRefusal(t) })
	// The API server enforces a policy once its informer has it. The probe
	// is a registration the manager leaves alone (cluster-management).
	probe := &fleet.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: "refusal-probe", Namespace: workspace,
			Labels: map[string]string{label: tokenName, fleet.ClusterManagementLabel: "test"}},
		Spec: fleet.ClusterRegistrationSpec{ClientID: "refusal-probe", ClientRandom: "p"},
	}
	if err := up.Client.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Client.Delete(context.Background(), probe) })
	fleettest.Eventually(t, timeout, func() error {
		p := &fleet.ClusterRegistration{}
		if err := up.Client.Get(ctx, client.ObjectKeyFromObject(probe), p); err != nil {
			return err
		}
		p.Status.ClusterName = "probe"
		err := up.Client.Status().Update(ctx, p, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "refused for this test") {
			return fmt.Errorf("policy not in force yet (%v)", err)
		}
		return nil
	})
}

// liftRefusal removes the refusal of refuseRegistrationStatus.
func liftRefusal(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: refusalName}},
		&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: refusalName}},
	} {
		if err := up.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
}
