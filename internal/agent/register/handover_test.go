package register

import (
	"context"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAwaitHandover runs the agent's wait for its hand-over Secret against a
// real API server, with a ServiceAccount token as the registration token:
// refused (403) until the read grant exists, then a watch by name that
// returns the Secret when it is written, and no other Secret.
func TestAwaitHandover(t *testing.T) {
	up := upstream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, sa, name = "handover", "import-token", "c-mine"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(up.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))
	tr := &authv1.TokenRequest{}
	must(up.Client.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}, tr))
	cfg := rest.AnonymousClientConfig(up.Config)
	cfg.BearerToken = tr.Status.Token

	type result struct {
		s   *corev1.Secret
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := awaitHandover(ctx, handoverWait{Config: cfg, Namespace: ns, Name: name,
			PollInterval: 100 * time.Millisecond, Deadline: time.Now().Add(time.Minute)})
		done <- result{s, err}
	}()
	notYet := func(what string) {
		t.Helper()
		select {
		case r := <-done:
			t.Fatalf("%s: returned early: %v %v", what, r.s, r.err)
		case <-time.After(time.Second):
		}
	}
	notYet("before the read grant")

	// The manager's read grant (as credsAccess writes it).
	must(up.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name + "-creds", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"},
			Verbs: []string{"get", "list", "watch", "delete"}, ResourceNames: []string{name}}}}))
	must(up.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-creds", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name + "-creds"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}))
	notYet("granted, no secret yet")

	// Another registration's secret: not readable, and not what it waits for.
	must(up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-other", Namespace: ns}, StringData: map[string]string{"token": "other"}}))
	tokenClient, err := upstreamClient(cfg)
	must(err)
	for what, err := range map[string]error{
		"list all secrets":      tokenClient.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)),
		"get another secret":    tokenClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c-other"}, &corev1.Secret{}),
		"list another by name":  tokenClient.List(ctx, &corev1.SecretList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": "c-other"}),
		"delete another secret": tokenClient.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-other", Namespace: ns}}),
		"watch all secrets":     watchErr(ctx, tokenClient, ns, nil),
		"watch another by name": watchErr(ctx, tokenClient, ns, client.MatchingFields{"metadata.name": "c-other"}),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with the import token: want 403, got %v", what, err)
		}
	}
	notYet("another secret written")

	must(up.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"token": "mine"}}))
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.s.Name != name || string(r.s.Data["token"]) != "mine" {
			t.Errorf("got secret %s with token %q, want %s with token mine", r.s.Name, r.s.Data["token"], name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the written hand-over secret was not seen")
	}
}

// watchErr opens a watch of Secrets and returns its error.
func watchErr(ctx context.Context, c client.WithWatch, ns string, sel client.ListOption) error {
	opts := []client.ListOption{client.InNamespace(ns)}
	if sel != nil {
		opts = append(opts, sel)
	}
	w, err := c.Watch(ctx, &corev1.SecretList{}, opts...)
	if err == nil {
		w.Stop()
	}
	return err
}
