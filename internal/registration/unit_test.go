package registration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/names"
)

func TestClusterLabels(t *testing.T) {
	got := ClusterLabels(map[string]string{
		"env": "dev", "fleet.cattle.io/cluster": "x", fleet.CreatedByAgentPodLabel: "pod-1",
		"management.cattle.io/cluster-display-name": "y", "example.com/team": "a",
	})
	want := map[string]string{"env": "dev", fleet.CreatedByAgentPodLabel: "pod-1", "example.com/team": "a"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestTokenExpiry(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name string
		ttl  *metav1.Duration
		want *time.Time
	}{
		{name: "no ttl", ttl: nil},
		{name: "zero", ttl: &metav1.Duration{}},
		{name: "negative", ttl: &metav1.Duration{Duration: -time.Hour}},
		{name: "240h", ttl: &metav1.Duration{Duration: 240 * time.Hour}, want: ptrTime(created.Add(240 * time.Hour))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}, Spec: fleet.ClusterRegistrationTokenSpec{TTL: tc.ttl}}
			got := tokenExpiry(tok)
			switch {
			case tc.want == nil && got != nil:
				t.Errorf("got %v, want never", got)
			case tc.want != nil && (got == nil || !got.Time.Equal(*tc.want)):
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

func TestAllowedSecretNamespace(t *testing.T) {
	for ns, want := range map[string]bool{
		"clusters": true, "fleet-local": false, "fleet-default": true, "cattle-fleet-system": true,
		"cattle-fleet-clusters-system": true, "cluster-abc": true, "kube-system": false, "other": false,
	} {
		if got := allowedSecretNamespace("clusters", ns); got != want {
			t.Errorf("allowedSecretNamespace(clusters, %s) = %v, want %v", ns, got, want)
		}
	}
	if !allowedSecretNamespace("fleet-local", "fleet-local") {
		t.Error("the local cluster must import from its own namespace")
	}
}

func TestAgentObjects(t *testing.T) {
	hn := true
	objs, err := AgentObjects(AgentManifest{Namespace: "cattle-fleet-system", Values: Values{APIServerURL: "https://x", Token: "t", TokenName: "n", ClusterNamespace: "ws"},
		ClientID: "id", Image: "img", CheckinInterval: time.Minute, Cluster: &fleet.Cluster{Spec: fleet.ClusterSpec{HostNetwork: &hn}}})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetName()]++
	}
	for _, n := range []string{"cattle-fleet-system", "fleet-agent-bootstrap", "fleet-agent", "cattle-fleet-system-fleet-agent-role"} {
		if kinds[n] == 0 {
			t.Errorf("missing object %s in %v", n, kinds)
		}
	}
}

func TestGrantRBACIsScoped(t *testing.T) {
	g := grant{SA: "request-1-uid", Registration: "request-1", Workspace: "ws", Cluster: "c1", ClusterNamespace: "cluster-ws-c1-abc"}
	for _, o := range g.objects() {
		if o.GetNamespace() != "" && o.GetNamespace() != g.Workspace && o.GetNamespace() != g.ClusterNamespace {
			t.Errorf("%T %s in unexpected namespace %s", o, o.GetName(), o.GetNamespace())
		}
	}
	role, _ := credsAccess("sys", "c-abc", "tok-sa", "ws", nil)
	if len(role.Rules) != 1 || len(role.Rules[0].ResourceNames) != 1 || role.Rules[0].ResourceNames[0] != "c-abc" {
		t.Errorf("creds role not limited to one secret: %+v", role.Rules)
	}
}

// TestGrantContentAccess: with the content API (the default) a credential
// has nothing cluster-scoped and reads bundlecontents in its own namespace;
// with ContentRBAC it also gets the binding to its Content ClusterRole.
func TestGrantContentAccess(t *testing.T) {
	for _, rbac := range []bool{false, true} {
		g := grant{SA: "request-1-uid", Registration: "request-1", Workspace: "ws", Cluster: "c1", ClusterNamespace: "cluster-ws-c1-abc", ContentRBAC: rbac}
		var bindings []*rbacv1.ClusterRoleBinding
		bundleContents := false
		for _, o := range g.objects() {
			switch o := o.(type) {
			case *rbacv1.ClusterRoleBinding:
				bindings = append(bindings, o)
			case *rbacv1.Role:
				for _, r := range o.Rules {
					if slices.Contains(r.Resources, contentapi.Resource) {
						if o.Namespace != g.ClusterNamespace || !slices.Equal(r.Verbs, []string{"get"}) {
							t.Errorf("bundlecontents granted as %v in %s", r.Verbs, o.Namespace)
						}
						bundleContents = true
					}
				}
			}
		}
		if !bundleContents {
			t.Errorf("ContentRBAC=%v: no get bundlecontents in the cluster namespace", rbac)
		}
		switch {
		case !rbac && len(bindings) != 0:
			t.Errorf("content API: cluster-wide bindings %v", bindings)
		case rbac && (len(bindings) != 1 || bindings[0].RoleRef.Name != names.ContentRoleName(g.ClusterNamespace)):
			t.Errorf("ContentRBAC: bindings %v, want one to %s", bindings, names.ContentRoleName(g.ClusterNamespace))
		}
	}
}

func TestWakeOnCluster(t *testing.T) {
	grantedAt := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	reg := func(granted bool, reason string) *fleet.ClusterRegistration {
		r := &fleet.ClusterRegistration{}
		r.Status.Granted = granted
		if reason != "" {
			r.Status.Conditions = []metav1.Condition{{Type: ConditionGranted, Status: metav1.ConditionTrue, Reason: reason,
				LastTransitionTime: metav1.NewTime(grantedAt)}}
		}
		return r
	}
	seen := func(at time.Time) *fleet.Cluster {
		c := &fleet.Cluster{}
		if !at.IsZero() {
			c.Status.Agent.LastSeen = metav1.NewTime(at)
		}
		return c
	}
	deleting := reg(false, "")
	deleting.DeletionTimestamp = &metav1.Time{Time: grantedAt}
	cases := []struct {
		name string
		reg  *fleet.ClusterRegistration
		c    *fleet.Cluster
		want bool
	}{
		{"not granted: may wait for the namespace", reg(false, ""), seen(time.Time{}), true},
		{"being deleted", deleting, seen(time.Time{}), false},
		{"granted, agent not seen yet", reg(true, ReasonGranted), seen(time.Time{}), false},
		{"granted, only an older check-in", reg(true, ReasonGranted), seen(grantedAt.Add(-time.Minute)), false},
		{"granted, first check-in after the grant", reg(true, ReasonGranted), seen(grantedAt.Add(time.Second)), true},
		{"granted, check-in in the same second", reg(true, ReasonGranted), seen(grantedAt), true},
		{"delivered: heartbeats cost nothing", reg(true, ReasonDelivered), seen(grantedAt.Add(time.Hour)), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := wakeOnCluster(tc.reg, tc.c); got != tc.want {
				t.Fatalf("wakeOnCluster = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNewRegistrationsFirst: a registration the manager has not seen is
// queued ahead of other work (its first pass lets its agent stop polling);
// the informer's initial list and updates are not.
func TestNewRegistrationsFirst(t *testing.T) {
	reg := func(name string) *fleet.ClusterRegistration {
		return &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ws", ResourceVersion: "1"}}
	}
	changed := reg("updated")
	changed.ResourceVersion = "2"
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	newFirst.Create(ctx, event.CreateEvent{Object: reg("listed"), IsInInitialList: true}, q)
	newFirst.Update(ctx, event.UpdateEvent{ObjectOld: reg("updated"), ObjectNew: changed}, q)
	newFirst.Create(ctx, event.CreateEvent{Object: reg("new")}, q)
	want := []struct {
		name     string
		priority int
	}{{"new", NewRegistrationPriority}, {"updated", 0}, {"listed", handler.LowPriority}}
	for _, w := range want {
		item, prio, _ := q.GetWithPriority()
		if item.Name != w.name || prio != w.priority {
			t.Errorf("got %s with priority %d, want %s with %d", item.Name, prio, w.name, w.priority)
		}
		q.Done(item)
	}
}

func TestImportRESTConfig(t *testing.T) {
	const head = "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
	for _, tc := range []struct {
		name, cluster, user, wantErr string
	}{
		{name: "inline", cluster: `{server: "https://h", certificate-authority-data: "` + "Zm9v" + `"}`, user: "{token: abc}"},
		{name: "basic auth", cluster: `{server: "https://h"}`, user: "{username: a, password: b}"},
		{name: "CA file", cluster: `{server: "https://h", certificate-authority: /etc/ca}`, user: "{token: abc}", wantErr: `cluster "c" certificate-authority`},
		{name: "token file", cluster: `{server: "https://h"}`, user: "{tokenFile: /t}", wantErr: `user "u" tokenFile`},
		{name: "cert files", cluster: `{server: "https://h"}`, user: "{client-certificate: /c, client-key: /k}", wantErr: `user "u" client-certificate, user "u" client-key`},
		{name: "auth provider", cluster: `{server: "https://h"}`, user: "{auth-provider: {name: oidc}}", wantErr: `user "u" auth-provider`},
		{name: "exec", cluster: `{server: "https://h"}`, user: "{exec: {apiVersion: client.authentication.k8s.io/v1, command: x}}", wantErr: `user "u" exec`},
		{name: "not a kubeconfig", cluster: "[", wantErr: "not a valid kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := head + "clusters: [{name: c, cluster: " + tc.cluster + "}]\nusers: [{name: u, user: " + tc.user + "}]\n"
			cfg, err := importRESTConfig([]byte(doc))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr == "" && cfg.Host != "https://h":
				t.Errorf("host %q", cfg.Host)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want it to contain %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), "/"):
				t.Errorf("the error quotes a path or the document: %v", err)
			}
		})
	}
}

// TestSupersedes: of two registrations of one clientID, exactly one
// replaces the other, even when both were created in the same second (the
// resolution of creationTimestamp): granted concurrently, they must not
// revoke each other.
func TestSupersedes(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	reg := func(name string, created time.Time) *fleet.ClusterRegistration {
		return &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created)}}
	}
	cases := []struct {
		name     string
		a, b     *fleet.ClusterRegistration
		aReplace bool
	}{
		{"newer replaces older", reg("request-b", at.Add(time.Second)), reg("request-a", at), true},
		{"older does not replace newer", reg("request-a", at), reg("request-b", at.Add(time.Second)), false},
		{"same second: the later name replaces", reg("request-b", at), reg("request-a", at), true},
		{"same second: the earlier name does not", reg("request-a", at), reg("request-b", at), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := supersedes(tc.a, tc.b); got != tc.aReplace {
				t.Errorf("supersedes(%s, %s) = %v, want %v", tc.a.Name, tc.b.Name, got, tc.aReplace)
			}
			if got := supersedes(tc.b, tc.a); got == tc.aReplace {
				t.Errorf("supersedes(%s, %s) = %v, want %v", tc.b.Name, tc.a.Name, got, !tc.aReplace)
			}
		})
	}
	self := reg("request-a", at)
	if supersedes(self, self) {
		t.Error("a registration replaces itself")
	}
}
