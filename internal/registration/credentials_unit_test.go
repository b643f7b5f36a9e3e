package registration

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
)

// TestHandoverVerdict: who gets a registration's credential through the
// content API, and when.
func TestHandoverVerdict(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const ttl = 40 * time.Minute
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "tok", Namespace: "ws", UID: types.UID("u1")}}
	owner := serviceAccountUser("ws", TokenSAName(tok))
	reg := func(mut func(*fleet.ClusterRegistration)) *fleet.ClusterRegistration {
		r := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "request-1", Namespace: "ws",
			Labels:      map[string]string{fleet.RegistrationTokenLabel: "tok"},
			Annotations: map[string]string{contentapi.HandoverAnnotation: contentapi.HandoverContentAPI}}}
		if mut != nil {
			mut(r)
		}
		return r
	}
	granted := func(at time.Time) func(*fleet.ClusterRegistration) {
		return func(r *fleet.ClusterRegistration) {
			r.Status.Granted = true
			r.Status.ClusterName = "c1"
			r.Status.Conditions = []metav1.Condition{{Type: ConditionGranted, Status: metav1.ConditionTrue, Reason: ReasonGranted, LastTransitionTime: metav1.NewTime(at)}}
		}
	}
	for _, tc := range []struct {
		name      string
		reg       *fleet.ClusterRegistration
		tok       *fleet.ClusterRegistrationToken
		user      string
		ready     bool
		forbidden string // substring of the refusal; empty: no error
	}{
		{name: "granted, its token", reg: reg(granted(now.Add(-time.Minute))), tok: tok, user: owner, ready: true},
		{name: "not granted yet: wait", reg: reg(nil), tok: tok, user: owner},
		{name: "waiting for the namespace: wait", reg: reg(func(r *fleet.ClusterRegistration) {
			r.Status.Conditions = []metav1.Condition{{Type: ConditionGranted, Status: metav1.ConditionFalse, Reason: ReasonWaitingNamespace}}
		}), tok: tok, user: owner},
		{name: "transient error: wait", reg: reg(func(r *fleet.ClusterRegistration) {
			r.Status.Conditions = []metav1.Condition{{Type: ConditionGranted, Status: metav1.ConditionFalse, Reason: "Error", Message: "conflict"}}
		}), tok: tok, user: owner},
		{name: "refused: the manager's reason", reg: reg(func(r *fleet.ClusterRegistration) {
			r.Status.Conditions = []metav1.Condition{{Type: ConditionGranted, Status: metav1.ConditionFalse, Reason: ReasonOtherWorkspace, Message: "clientID is already used"}}
		}), tok: tok, user: owner, forbidden: "registration refused: clientID is already used"},
		{name: "another token's account", reg: reg(granted(now)), tok: tok, user: serviceAccountUser("ws", "other-token-sa"), forbidden: "only the registration token"},
		{name: "a cluster's own credential", reg: reg(granted(now)), tok: tok, user: serviceAccountUser("cluster-ns", "request-x"), forbidden: "only the registration token"},
		{name: "same name, token in another namespace", reg: reg(granted(now)), tok: tok, user: serviceAccountUser("other", TokenSAName(tok)), forbidden: "only the registration token"},
		{name: "token gone", reg: reg(granted(now)), tok: nil, user: owner, forbidden: "only the registration token"},
		{name: "asked for a Secret", reg: reg(func(r *fleet.ClusterRegistration) { granted(now)(r); r.Annotations = nil }), tok: tok, user: owner, forbidden: "handed over in a Secret"},
		{name: "granted too long ago", reg: reg(granted(now.Add(-ttl - time.Second))), tok: tok, user: owner, forbidden: "no longer handed over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, err := handoverVerdict(tc.reg, tc.tok, tc.user, ttl, now)
			if ready != tc.ready {
				t.Errorf("ready = %v, want %v", ready, tc.ready)
			}
			switch {
			case tc.forbidden == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.forbidden != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbidden)):
				t.Errorf("error = %v, want Forbidden containing %q", err, tc.forbidden)
			}
		})
	}
}

// TestCredentialWaiters: a change of one registration wakes every watch of
// it, and only of it; a released watch leaves nothing behind.
func TestCredentialWaiters(t *testing.T) {
	c := NewCredentials()
	a := types.NamespacedName{Namespace: "ws", Name: "a"}
	b := types.NamespacedName{Namespace: "ws", Name: "b"}
	chA1, relA1 := c.wait(a)
	chA2, relA2 := c.wait(a)
	chB, relB := c.wait(b)
	c.wake(a)
	for i, ch := range []<-chan struct{}{chA1, chA2} {
		select {
		case <-ch:
		default:
			t.Errorf("watch %d of a not woken", i+1)
		}
	}
	select {
	case <-chB:
		t.Error("watch of b woken by a change of a")
	default:
	}
	relA1()
	relA2()
	relB()
	if n := len(c.waiters); n != 0 {
		t.Errorf("%d waiters left after every watch ended", n)
	}
}

// TestRefusedReasons: every reason a registration is refused with makes
// the content API hand-over answer Forbidden with the manager's message,
// and a wait or a transient error does not. The list of refusals is read
// from the package's source (each &refusal{Reason, ...} literal), so that
// a new refusal cannot be left out of refused unnoticed.
func TestRefusedReasons(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "tok", Namespace: "ws", UID: types.UID("u1")}}
	owner := serviceAccountUser("ws", TokenSAName(tok))
	verdict := func(reason string) (bool, error) {
		reg := &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "request-1", Namespace: "ws",
			Annotations: map[string]string{contentapi.HandoverAnnotation: contentapi.HandoverContentAPI}}}
		reg.Status.Conditions = []metav1.Condition{{Type: ConditionGranted, Status: metav1.ConditionFalse, Reason: reason, Message: "why: " + reason}}
		return handoverVerdict(reg, tok, owner, time.Hour, now)
	}
	reasons := refusalReasons(t)
	for _, want := range []string{ReasonInvalid, ReasonUnknownToken, ReasonTokenExpired, ReasonTTLRequired,
		ReasonInvalidName, ReasonOtherWorkspace, ReasonNameConflict} {
		if !reasons[want] {
			t.Errorf("reason %s not found among the refusals in the source (found %v)", want, reasons)
		}
	}
	for reason := range reasons {
		t.Run("refused/"+reason, func(t *testing.T) {
			ready, err := verdict(reason)
			if ready || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "registration refused: why: "+reason) {
				t.Errorf("verdict = %v, %v; want Forbidden with the refusal's message", ready, err)
			}
		})
	}
	for _, reason := range []string{ReasonWaitingNamespace, "Error", ""} {
		t.Run("wait/"+reason, func(t *testing.T) {
			if ready, err := verdict(reason); ready || err != nil {
				t.Errorf("verdict = %v, %v; want a wait (false, nil)", ready, err)
			}
		})
	}
}

// refusalReasons is the set of reasons of the &refusal{...} literals in
// the package's non-test source, by the name of their constant.
func refusalReasons(t *testing.T) map[string]bool {
	t.Helper()
	consts := map[string]string{
		"ReasonInvalid": ReasonInvalid, "ReasonUnknownToken": ReasonUnknownToken, "ReasonTokenExpired": ReasonTokenExpired,
		"ReasonTTLRequired": ReasonTTLRequired, "ReasonInvalidName": ReasonInvalidName,
		"ReasonOtherWorkspace": ReasonOtherWorkspace, "ReasonNameConflict": ReasonNameConflict,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if typ, ok := lit.Type.(*ast.Ident); !ok || typ.Name != "refusal" || len(lit.Elts) == 0 {
				return true
			}
			reason, _ := lit.Elts[0].(*ast.Ident)
			if reason == nil || consts[reason.Name] == "" {
				t.Errorf("%s: a refusal whose reason this test does not know; add it to refused and here", fset.Position(lit.Pos()))
				return true
			}
			out[consts[reason.Name]] = true
			return true
		})
	}
	return out
}
