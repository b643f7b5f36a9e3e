package register

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestStoredCredentialFollowsNewBootstrap: the agent starts with a stored
// credential the manager accepts and, next to it, a fleet-agent-bootstrap
// Secret naming another API server URL or CA, as a re-import or `helm
// upgrade` writes it when the manager moved or rotated its CA. The agent
// registers with the bootstrap Secret (the test plays the manager that
// grants it), stores the new credential, which points at the new URL with
// the new CA and works, and deletes the bootstrap Secret. Deleting it
// unused instead would leave the agent on the old endpoint with nothing to
// fall back on once that goes away.
func TestStoredCredentialFollowsNewBootstrap(t *testing.T) {
	// Another name of the same API server (its certificate is for both),
	// and a CA bundle with one more certificate, as a rotation has it.
	up := upstream(t)
	other := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	other.Close()
	bundle := append(append([]byte{}, up.Config.CAData...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Certificate().Raw})...)
	for _, tc := range []struct {
		name, prefix, url string
		ca                []byte
	}{
		{name: "another API server URL", prefix: "follow-url", url: strings.Replace(up.Config.Host, "127.0.0.1", "localhost", 1), ca: up.Config.CAData},
		{name: "a rotated CA", prefix: "follow-ca", url: up.Config.Host, ca: bundle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.url == up.Config.Host && string(tc.ca) == string(up.Config.CAData) {
				t.Fatal("the test case changes nothing")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			w := newWorld(t, ctx, tc.prefix)
			old := w.storeCredential(ctx, up.Config.Host, up.Config.CAData)
			w.writeBootstrap(ctx, tc.url, tc.ca)

			got, err := w.getGranted(ctx)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if got.Host != tc.url || string(got.CA) != string(tc.ca) || got.Token() == old.Token() {
				t.Errorf("Get returned a credential for %s (new CA: %v, new token: %v), want a new one for %s with the new CA",
					got.Host, string(got.CA) == string(tc.ca), got.Token() != old.Token(), tc.url)
			}
			host, ca := w.storedServer(ctx)
			if host != tc.url || string(ca) != string(tc.ca) {
				t.Errorf("stored credential points at %s (new CA: %v), want %s with the new CA", host, string(ca) == string(tc.ca), tc.url)
			}
			if err := w.bootstrapErr(ctx); !apierrors.IsNotFound(err) {
				t.Errorf("the bootstrap secret is still there after the registration with it: %v", err)
			}
			if n := len(w.registrations(ctx)); n != 1 {
				t.Errorf("%d registrations filed, want 1", n)
			}
			// The next start goes on with the new credential.
			again, err := Get(ctx, Options{Downstream: w.up.Client, Namespace: w.agentNS})
			if err != nil || again.Host != tc.url || again.Token() != got.Token() {
				t.Fatalf("next start: %v", err)
			}
		})
	}
}

// TestUnreachableStoredFallsBackToBootstrap: the stored credential names an
// API server nothing listens on any more (the manager moved). With a
// bootstrap Secret present, the agent registers with it, as Rancher
// Fleet's agent does; without one it reports the connection error and
// keeps the stored credential (the manager may be back later).
func TestUnreachableStoredFallsBackToBootstrap(t *testing.T) {
	up := upstream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	gone := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	goneURL := gone.URL
	gone.Close()
	w := newWorld(t, ctx, "unreachable")
	w.storeCredential(ctx, goneURL, up.Config.CAData)

	_, err := Get(ctx, Options{Downstream: w.up.Client, Namespace: w.agentNS})
	if err == nil || errors.Is(err, ErrNoBootstrap) || errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "checking stored credential") {
		t.Fatalf("without a bootstrap secret: %v, want the connection error", err)
	}
	if host, _ := w.storedServer(ctx); host != goneURL {
		t.Fatalf("the stored credential was replaced without a bootstrap secret: %s", host)
	}

	w.writeBootstrap(ctx, up.Config.Host, up.Config.CAData)
	got, err := w.getGranted(ctx)
	if err != nil {
		t.Fatalf("Get with a bootstrap secret: %v", err)
	}
	if host, _ := w.storedServer(ctx); got.Host != up.Config.Host || host != up.Config.Host {
		t.Errorf("credential for %s, stored for %s, want %s", got.Host, host, up.Config.Host)
	}
	if err := Check(ctx, got); err != nil {
		t.Errorf("the new credential does not work: %v", err)
	}
	if err := w.bootstrapErr(ctx); !apierrors.IsNotFound(err) {
		t.Errorf("the bootstrap secret is still there after the registration with it: %v", err)
	}
}

// TestSameRegistration: what makes a bootstrap Secret only repeat the
// stored credential's registration.
func TestSameRegistration(t *testing.T) {
	stored := func(host, ca, ws string) *Credential {
		c := newCredential(host, []byte(ca), "t")
		c.ClusterNamespace = ws
		return c
	}
	boot := func(url, ca, ws string) *Bootstrap {
		return &Bootstrap{APIServerURL: url, APIServerCA: []byte(ca), ClusterNamespace: ws}
	}
	for _, tc := range []struct {
		name   string
		stored *Credential
		boot   *Bootstrap
		mode   string
		want   bool
	}{
		{name: "same", stored: stored("https://up:6443", "ca", "ws"), boot: boot("https://up:6443", "ca", "ws"), want: true},
		{name: "trailing slash and newline", stored: stored("https://up:6443", "ca\n", "ws"), boot: boot("https://up:6443/", "ca", "ws"), want: true},
		{name: "other URL", stored: stored("https://up:6443", "ca", "ws"), boot: boot("https://new:6443", "ca", "ws")},
		{name: "other CA", stored: stored("https://up:6443", "ca", "ws"), boot: boot("https://up:6443", "ca2", "ws")},
		{name: "CA dropped", stored: stored("https://up:6443", "ca", "ws"), boot: boot("https://up:6443", "", "ws")},
		{name: "other workspace", stored: stored("https://up:6443", "ca", "ws"), boot: boot("https://up:6443", "ca", "ws2")},
		{name: "system store", stored: stored("https://up:6443", "", "ws"), boot: boot("https://up:6443", "ca", "ws"), want: true},
		{name: "system store, now strict", stored: stored("https://up:6443", "", "ws"), boot: boot("https://up:6443", "ca", "ws"), mode: "strict"},
		{name: "no CA at all, strict", stored: stored("https://up:6443", "", "ws"), boot: boot("https://up:6443", "", "ws"), mode: "strict", want: true},
	} {
		if got := sameRegistration(tc.stored, tc.boot, tc.mode); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
