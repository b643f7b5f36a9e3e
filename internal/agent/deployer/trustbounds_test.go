package deployer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// interceptor passes requests to the API server, except that while on it
// hands those that match to do instead.
type interceptor struct {
	next  http.RoundTripper
	on    *atomic.Bool
	match func(req *http.Request, body []byte) bool
	// do answers a matching request; next reaches the API server.
	do func(next http.RoundTripper, req *http.Request) (*http.Response, error)
}

func (i *interceptor) RoundTrip(req *http.Request) (*http.Response, error) {
	if !i.on.Load() {
		return i.next.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	if i.match(req, body) {
		return i.do(i.next, req)
	}
	return i.next.RoundTrip(req)
}

// intercepted is admin with every request of a client made from it going
// through an interceptor, active while on is set.
func intercepted(admin *rest.Config, on *atomic.Bool, match func(*http.Request, []byte) bool,
	do func(http.RoundTripper, *http.Request) (*http.Response, error)) *rest.Config {
	cfg := rest.CopyConfig(admin)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return &interceptor{next: rt, on: on, match: match, do: do}
	}
	return cfg
}

// Reading the signing key is bounded: with the API server accepting the
// read and never answering it, a deploy (whose context ends only when the
// agent stops) returns an error naming the key read
// instead of hanging with the key lock held, and the next deploy reads the
// key again.
func TestSigningKeyReadBounded(t *testing.T) {
	const agentNS, ns = "trust-bound-agent", "trust-bound"
	defer func(d time.Duration) { signerLoadTimeout = d }(signerLoadTimeout)
	signerLoadTimeout = 200 * time.Millisecond
	var stalled atomic.Bool
	stalled.Store(true)
	cfg := intercepted(downstream(t).Config, &stalled, func(req *http.Request, _ []byte) bool {
		return strings.HasSuffix(req.URL.Path, "/namespaces/"+agentNS+"/secrets/"+SigningKeySecret)
	}, func(_ http.RoundTripper, req *http.Request) (*http.Response, error) {
		<-req.Context().Done()
		return nil, req.Context().Err()
	})
	d, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	done := make(chan error, 1)
	go func() {
		_, err := deployFiles(t, d, "app", cmFile("app", "v1"), opts)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the deploy hangs on a key read that never returns")
	}
	if err == nil || !strings.Contains(err.Error(), "reading the release signing key") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deploy with a stalled key read: %v, want the key read's deadline", err)
	}
	stalled.Store(false)
	if rel, err := deployFiles(t, d, "app", cmFile("app", "v1"), opts); err != nil || rel.Version != 1 {
		t.Fatalf("deploy once the key can be read: %v (%v)", rel, err)
	}
}

// The Secret under the name of a release's next revision is a revision
// the agent wrote itself (another process of the agent, with the same
// key, stored it after this one read the release: two agents during a
// rolling update). It is not the foreign Secret the agent deletes to
// make way (TestForeignSecretUnderNextRevisionName): it stays as it is,
// and the deploy fails naming it; the next deploy builds on it.
func TestOwnRevisionUnderNextRevisionNameKept(t *testing.T) {
	ctx := context.Background()
	const agentNS, ns = "trust-own-next-agent", "trust-own-next"
	admin := downstream(t).Config
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	other, err := New(admin, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	next := storageKey("app", 2)
	var racing atomic.Bool
	var otherErr error
	cfg := intercepted(admin, &racing, func(req *http.Request, body []byte) bool {
		return req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/namespaces/"+ns+"/secrets") &&
			bytes.Contains(body, []byte(next))
	}, func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		// The other process stores revision 2 first, then this one's
		// write of it reaches the API server.
		racing.Store(false)
		_, otherErr = deployFiles(t, other, "app", cmFile("app", "from-other"), opts)
		return next.RoundTrip(req)
	})
	d, err := New(cfg, agentNS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deployFiles(t, d, "app", cmFile("app", "v1"), opts); err != nil {
		t.Fatal(err)
	}
	racing.Store(true)
	_, err = deployFiles(t, d, "app", cmFile("app", "from-this"), opts)
	if otherErr != nil {
		t.Fatalf("the other process's deploy: %v", otherErr)
	}
	theirs, gerr := d.core.Secrets(ns).Get(ctx, next, metav1.GetOptions{})
	if gerr != nil {
		t.Fatal(gerr)
	}
	if err == nil || !strings.Contains(err.Error(), ns+"/"+next) || !strings.Contains(err.Error(), "already a revision this agent wrote") {
		t.Fatalf("deploy racing the other process: %v, want an error naming %s/%s", err, ns, next)
	}
	rel, derr := decodeStored(theirs.Data["release"])
	if derr != nil {
		t.Fatal(derr)
	}
	if !strings.Contains(rel.Manifest, "from-other") {
		t.Fatalf("%s is no longer the other process's revision: %s", next, rel.Manifest)
	}
	cur, err := d.Current(context.Background(), "app", opts)
	if err != nil || cur == nil || cur.Version != 2 {
		t.Fatalf("current release %v (%v), want the other process's revision 2", cur, err)
	}
	if rel, err := deployFiles(t, d, "app", cmFile("app", "v3"), opts); err != nil || rel.Version != 3 {
		t.Fatalf("the next deploy: %v (%v), want revision 3", rel, err)
	}
}
