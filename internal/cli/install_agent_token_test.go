package cli

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/install"
)

// agentTokenValues runs `fleet install agent-token --values` against the
// manager cluster and parses the output.
func agentTokenValues(t *testing.T, kubeconfig, workspace string, args ...string) map[string]any {
	t.Helper()
	args = append([]string{"--kubeconfig", kubeconfig, "-n", workspace, "install", "agent-token", "--values"}, args...)
	out, _, err := runFleet(t, t.TempDir(), "", args...)
	if err != nil {
		t.Fatalf("fleet %s: %v", strings.Join(args, " "), err)
	}
	v, err := install.ParseValues([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAgentTokenKeepsManagerEndpoint: the URL and CA agents get are the
// ones the manager put into the token's values, not the kubeconfig's
// (here 127.0.0.1, as through a tunnel), unless a flag overrides them.
func TestAgentTokenKeepsManagerEndpoint(t *testing.T) {
	env := startManager(t)
	if !strings.Contains(env.Config.Host, "127.0.0.1") {
		t.Fatalf("the kubeconfig should point at 127.0.0.1, not %s", env.Config.Host)
	}
	ws := newWorkspace(t, env, "endpoint")

	v := agentTokenValues(t, env.Kubeconfig, ws)
	if v["apiServerURL"] != managerURL || v["apiServerCA"] != managerCA || v["token"] == "" || v["clusterNamespace"] != ws {
		t.Errorf("values: url %v, ca %q, ns %v: want the manager's %s and its CA", v["apiServerURL"], v["apiServerCA"], v["clusterNamespace"], managerURL)
	}

	// --server-url replaces the URL only; --no-ca and --ca-file the CA only.
	v = agentTokenValues(t, env.Kubeconfig, ws, "--server-url", "https://lb.example.com")
	if v["apiServerURL"] != "https://lb.example.com" || v["apiServerCA"] != managerCA {
		t.Errorf("--server-url: url %v, ca %q", v["apiServerURL"], v["apiServerCA"])
	}
	v = agentTokenValues(t, env.Kubeconfig, ws, "--no-ca")
	if v["apiServerURL"] != managerURL || v["apiServerCA"] != "" {
		t.Errorf("--no-ca: url %v, ca %q", v["apiServerURL"], v["apiServerCA"])
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	otherCA := "-----BEGIN CERTIFICATE-----\nT1RIRVI=\n-----END CERTIFICATE-----\n"
	if err := os.WriteFile(caFile, []byte(otherCA), 0o600); err != nil {
		t.Fatal(err)
	}
	v = agentTokenValues(t, env.Kubeconfig, ws, "-c", caFile)
	if v["apiServerURL"] != managerURL || v["apiServerCA"] != otherCA {
		t.Errorf("--ca-file: url %v, ca %q", v["apiServerURL"], v["apiServerCA"])
	}

	// The manifests carry the same URL in the bootstrap Secret.
	out, _, err := runFleet(t, t.TempDir(), "", "--kubeconfig", env.Kubeconfig, "-n", ws, "install", "agent-token")
	if err != nil {
		t.Fatal(err)
	}
	if want := base64.StdEncoding.EncodeToString([]byte(managerURL)); !strings.Contains(out, want) {
		t.Errorf("manifests lack apiServerURL %s (%s)", managerURL, want)
	}
	if kc := base64.StdEncoding.EncodeToString([]byte(env.Config.Host)); strings.Contains(out, kc) {
		t.Errorf("manifests give agents the kubeconfig's server %s", env.Config.Host)
	}
}

// TestAgentEndpointFallback: the kubeconfig is used only for what the
// token's values leave empty, and its CA only together with its server.
func TestAgentEndpointFallback(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("KUBECONFIG-CA")}}
	cases := []struct {
		name            string
		flags, token    endpoint
		wantURL, wantCA string
	}{
		{name: "token", token: endpoint{URL: managerURL, CA: "TOKEN-CA"}, wantURL: managerURL, wantCA: "TOKEN-CA"},
		{name: "empty token", wantURL: cfg.Host, wantCA: "KUBECONFIG-CA"},
		{name: "token URL without CA", token: endpoint{URL: managerURL}, wantURL: managerURL},
		{name: "token CA without URL", token: endpoint{CA: "TOKEN-CA"}, wantURL: cfg.Host, wantCA: "TOKEN-CA"},
		{name: "flags", flags: endpoint{URL: "https://x.example", CA: "FLAG-CA", CASet: true},
			token: endpoint{URL: managerURL, CA: "TOKEN-CA"}, wantURL: "https://x.example", wantCA: "FLAG-CA"},
		{name: "no CA", flags: endpoint{CASet: true}, token: endpoint{URL: managerURL, CA: "TOKEN-CA"}, wantURL: managerURL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, ca, err := agentEndpoint(cfg, tc.flags, tc.token)
			if err != nil || url != tc.wantURL || ca != tc.wantCA {
				t.Errorf("got %q %q %v, want %q %q", url, ca, err, tc.wantURL, tc.wantCA)
			}
		})
	}
	if _, _, err := agentEndpoint(cfg, endpoint{}, endpoint{URL: "http://fleet.example.com"}); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Errorf("a plain-HTTP URL from the token: err = %v", err)
	}
}

// TestTokenEndpointDefaulted: a manager installed without apiServerURL
// writes its own in-cluster address into token values and marks it
// defaulted; agents then get the kubeconfig's server, as before the token's
// values were preferred.
func TestTokenEndpointDefaulted(t *testing.T) {
	cfg := &rest.Config{Host: "https://fleet.example.com:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("KUBECONFIG-CA")}}
	values := map[string]any{"apiServerURL": "https://10.43.0.1:443", "apiServerCA": "IN-CLUSTER-CA"}
	url, ca, err := agentEndpoint(cfg, endpoint{}, tokenEndpoint(values, true))
	if err != nil || url != cfg.Host || ca != "KUBECONFIG-CA" {
		t.Errorf("defaulted: got %q %q %v, want the kubeconfig's", url, ca, err)
	}
	url, ca, err = agentEndpoint(cfg, endpoint{}, tokenEndpoint(values, false))
	if err != nil || url != "https://10.43.0.1:443" || ca != "IN-CLUSTER-CA" {
		t.Errorf("configured: got %q %q %v, want the token's", url, ca, err)
	}
}

// TestAgentTokenRefusesBeforeCreating: invalid options fail without
// creating a token; a token whose output then fails is deleted.
func TestAgentTokenRefusesBeforeCreating(t *testing.T) {
	env := startManager(t)
	ws := newWorkspace(t, env, "refuse")
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{name: "negative ttl", args: []string{"-t", "-1h"}, want: `--ttl "-1h": must not be negative`},
		{name: "plain http server url", args: []string{"--server-url", "http://fleet.example.com"}, want: "must be an https:// URL"},
		{name: "server url without host", args: []string{"--server-url", "fleet.example.com:6443"}, want: "must be an https:// URL"},
		{name: "not a CA", args: []string{"--ca-file", notPEM}, want: "not a PEM certificate"},
		{name: "bad system namespace", args: []string{"--system-namespace", "Not_A_Namespace"}, want: "--system-namespace"},
		{name: "zero timeout", args: []string{"--timeout", "0s"}, want: "--timeout 0s: must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--kubeconfig", env.Kubeconfig, "-n", ws, "install", "agent-token"}, tc.args...)
			out, _, err := runFleet(t, t.TempDir(), "", args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q (%d bytes printed)", err, tc.want, len(out))
			}
			tokens := &fleet.ClusterRegistrationTokenList{}
			if err := env.Client.List(context.Background(), tokens, client.InNamespace(ws)); err != nil {
				t.Fatal(err)
			}
			for _, tok := range tokens.Items {
				t.Errorf("token %s created (ttl %v) although the command failed", tok.Name, tok.Spec.TTL)
			}
		})
	}

	// The values cannot arrive within 1ms: the token created is deleted
	// and named in the error.
	ws = newWorkspace(t, env, "refuse-late")
	_, _, err := runFleet(t, t.TempDir(), "", "--kubeconfig", env.Kubeconfig, "-n", ws, "install", "agent-token", "--timeout", "1ms")
	if err == nil || !strings.Contains(err.Error(), "got no values within") || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("error %v, want the timeout and the token deleted", err)
	}
	eventually(t, 60*time.Second, func() error {
		tokens := &fleet.ClusterRegistrationTokenList{}
		if err := env.Client.List(context.Background(), tokens, client.InNamespace(ws)); err != nil {
			return err
		}
		for _, tok := range tokens.Items {
			if tok.DeletionTimestamp == nil {
				return &leftToken{tok.Name}
			}
		}
		return nil
	})
}

type leftToken struct{ name string }

func (e *leftToken) Error() string { return "token " + e.name + " left behind" }
