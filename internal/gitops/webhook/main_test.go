package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/testenv"
)

// env is the manager cluster of every test of this package: the receiver
// reads GitRepos and webhook Secrets from a real API server.
var env *testenv.Cluster

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	env, err = testenv.Start(testenv.Options{Name: "webhook"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return m.Run()
}

// gitRepoLists counts the GitRepo LISTs a client sends to the API server.
type gitRepoLists struct {
	mu sync.Mutex
	n  int
}

func (c *gitRepoLists) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countingReader is a client of the test API server whose GitRepo LISTs
// (GET .../gitrepos, cluster-wide or in a namespace) are counted.
func countingReader(t *testing.T) (client.Reader, *gitRepoLists) {
	t.Helper()
	lists := &gitRepoLists{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/gitrepos") {
				lists.mu.Lock()
				lists.n++
				lists.mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, lists
}

func newNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

func createRepo(t *testing.T, ns, name string, spec fleet.GitRepoSpec) {
	t.Helper()
	gr := &fleet.GitRepo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := env.Client.Create(context.Background(), gr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), gr) })
}

// webhookSecret creates the shared webhook Secret in a system namespace
// of its own.
func webhookSecret(t *testing.T, data map[string][]byte) string {
	t.Helper()
	ns := newNamespace(t, "system")
	webhookSecretIn(t, ns, "gitjob-webhook", data)
	return ns
}

// webhookSecretIn creates a Secret with data in ns and returns its name.
func webhookSecretIn(t *testing.T, ns, name string, data map[string][]byte) string {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return name
}
