package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/scheme"
)

// slotFixture is a namespace of BundleDeployments, each naming a Content
// of its own, and a handler whose live client goes through wraps.
type slotFixture struct {
	ns       string
	contents map[string]string // deployment name -> Content name
}

// newSlotFixture creates namespace ns with a deployment (and its Content)
// per name; those in cached are the only ones the handler's cache shows.
func newSlotFixture(t *testing.T, ns string, names []string, cached ...string) *slotFixture {
	t.Helper()
	ctx := context.Background()
	sfx := suffix(t)
	f := &slotFixture{ns: ns + sfx, contents: map[string]string{}}
	if err := up.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}); err != nil {
		t.Fatal(err)
	}
	for _, bd := range names {
		content := "s-" + bd + sfx
		f.contents[bd] = content
		d := &fleet.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: bd},
			Spec: fleet.BundleDeploymentSpec{DeploymentID: content + ":options"}}
		for _, c := range cached {
			if c == bd {
				d.Labels = map[string]string{cachedLabel: "true"}
			}
		}
		for _, o := range []client.Object{d, &fleet.Content{ObjectMeta: metav1.ObjectMeta{Name: content}, Content: []byte(content)}} {
			if err := up.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

// handler is a content API handler over a lagging cache and a live client
// whose transport wraps adds.
func (f *slotFixture) handler(t *testing.T, wraps ...func(http.RoundTripper) http.RoundTripper) *handler {
	t.Helper()
	cfg := rest.CopyConfig(up.Config)
	for _, w := range wraps {
		cfg.Wrap(w)
	}
	live, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &handler{cache: laggingCache(t), live: live}
}

func (f *slotFixture) deploymentPath(bd string) string {
	return "/apis/" + fleet.GroupVersion.Group + "/" + fleet.GroupVersion.Version + "/namespaces/" + f.ns + "/bundledeployments/" + bd
}

func (f *slotFixture) contentPath(bd string) string {
	return "/apis/" + fleet.GroupVersion.Group + "/" + fleet.GroupVersion.Version + "/contents/" + f.contents[bd]
}

// assertBusy fails unless code and retry are a 429 with a Retry-After in
// the range the content API draws from; it returns the Retry-After.
func assertBusy(t *testing.T, what string, code int, retry string) int {
	t.Helper()
	n, err := strconv.Atoi(retry)
	if code != http.StatusTooManyRequests || err != nil || n < busyRetryMin || n > busyRetryMax {
		t.Fatalf("%s: %d, Retry-After %q; want 429 with Retry-After %d to %d", what, code, retry, busyRetryMin, busyRetryMax)
	}
	return n
}

// TestContentReadsHaveTheirOwnSlots: while reads of deployments the cache
// lacks take every slot they have (the API server holds them), the Content
// a rollout's agents wait on is still read and served: misses of
// deployments cannot starve it.
func TestContentReadsHaveTheirOwnSlots(t *testing.T) {
	ctx := context.Background()
	f := newSlotFixture(t, "content-slots", []string{"held", "fresh", "rollout"}, "rollout")
	hold := newHeldRead(f.deploymentPath("held"))
	h := f.handler(t, hold.wrap)
	h.liveSlots.size = 1
	srv, c, arrived, done := contentServer(t, h)
	t.Cleanup(hold.free) // before the server closes: it waits for its handlers
	drain(t, arrived)
	drain(t, done)

	held := make(chan int, 1)
	go func() {
		code, _, _ := getContent(ctx, c, srv, "held", f.ns, f.contents["held"], "held")
		held <- code
	}()
	select {
	case <-hold.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the held read never reached the API server")
	}
	code, retry := getStatus(t, c, srv, f.ns, f.contents["fresh"], "fresh")
	assertBusy(t, "another deployment's miss while its slots are taken", code, retry)

	// The cache shows the rollout's deployment; its Content is read from
	// the API server.
	code, bc, err := getContent(ctx, c, srv, "rollout", f.ns, f.contents["rollout"], "rollout")
	if err != nil || code != http.StatusOK || string(bc.Content) != f.contents["rollout"] {
		t.Fatalf("Content while deployment reads hold every slot: %d, %v, %v; want the Content", code, bc, err)
	}
	hold.free()
	if code := <-held; code != http.StatusOK {
		t.Errorf("request whose read was held: %d, want 200", code)
	}
}

// answerStatus makes the API server's answer to every GET of path st, as
// a saturated API server answers (no Retry-After header, so the manager's
// client gives it back at once instead of retrying it).
func answerStatus(path string, st metav1.Status) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet || r.URL.Path != path {
				return rt.RoundTrip(r)
			}
			st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
			st.Status = metav1.StatusFailure
			b, err := json.Marshal(&st)
			if err != nil {
				return nil, err
			}
			return &http.Response{StatusCode: int(st.Code), Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(string(b))), Request: r}, nil
		})
	}
}

// TestAPIServerBusyAnswered429: when the API server answers the content
// API's own read 429 (priority and fairness saturated) or times out, the
// agent gets 429 with Retry-After, which its client retries, not a 500,
// which nothing retries.
func TestAPIServerBusyAnswered429(t *testing.T) {
	ctx := context.Background()
	f := newSlotFixture(t, "apiserver-busy", []string{"missed", "cached"}, "cached")
	h := f.handler(t,
		answerStatus(f.deploymentPath("missed"), metav1.Status{Code: http.StatusTooManyRequests,
			Reason: metav1.StatusReasonTooManyRequests, Message: "too many requests"}),
		answerStatus(f.contentPath("cached"), metav1.Status{Code: http.StatusGatewayTimeout,
			Reason: metav1.StatusReasonTimeout, Message: "the request timed out"}))
	srv, c, arrived, done := contentServer(t, h)
	drain(t, arrived)
	drain(t, done)

	code, retry := getStatus(t, c, srv, f.ns, f.contents["missed"], "missed")
	assertBusy(t, "a deployment read the API server answered 429", code, retry)
	code, retry = getStatus(t, c, srv, f.ns, f.contents["cached"], "cached")
	assertBusy(t, "a Content read the API server timed out", code, retry)
	if code, _, err := getContent(ctx, c, srv, "other", f.ns, f.contents["missed"], "cached"); err != nil || code != http.StatusNotFound {
		t.Errorf("a Content no deployment names: %d, %v; want 404", code, err)
	}
}

// TestBusyRetryAfterVaries: the requests answered 429 because no slot was
// free are told to come back after different times within the range, so
// that the waiters of one read do not all retry at once.
func TestBusyRetryAfterVaries(t *testing.T) {
	f := newSlotFixture(t, "busy-retry", []string{"held", "fresh"})
	hold := newHeldRead(f.deploymentPath("held"))
	h := f.handler(t, hold.wrap)
	h.liveSlots.size = 1
	srv, c, arrived, done := contentServer(t, h)
	t.Cleanup(hold.free)
	drain(t, arrived)
	drain(t, done)

	go func() { _, _, _ = getContent(context.Background(), c, srv, "held", f.ns, f.contents["held"], "held") }()
	select {
	case <-hold.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the held read never reached the API server")
	}
	seen := map[int]bool{}
	for range 20 {
		code, retry := getStatus(t, c, srv, f.ns, f.contents["fresh"], "fresh")
		seen[assertBusy(t, "a miss while every slot is taken", code, retry)] = true
	}
	if len(seen) < 2 {
		t.Errorf("20 answers 429 all had Retry-After %v; want them spread over %d to %d s", seen, busyRetryMin, busyRetryMax)
	}
}
