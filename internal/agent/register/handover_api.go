package register

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetgo/fleet/internal/contentapi"
)

// credentialAPI is the registration token's client of the manager's
// registrationcredentials (package contentapi): the credential hand-over
// that writes nothing on the manager's API server.
type credentialAPI struct {
	rest rest.Interface
}

// newCredentialAPI builds the client on the registration token's config,
// without its request timeout (a watch lasts longer).
func newCredentialAPI(cfg *rest.Config) (*credentialAPI, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = 0
	rc, err := contentapi.NewRESTClient(c, nil)
	if err != nil {
		return nil, err
	}
	return &credentialAPI{rest: rc}, nil
}

// offers is what the manager's content API offers a registering agent.
type offers struct {
	// credential: it hands the credential over (registrationcredentials).
	credential bool
	// clusterStatus: it takes the agent's check-ins (clusterstatuses), so
	// the cluster needs no grant in the workspace namespace.
	clusterStatus bool
}

// served reports what the manager's content API offers (from discovery).
// An API server that does not serve the content API, a manager that is not
// answering it (503) or an API server that refuses the question mean
// nothing: the agent then asks for, and waits for, a hand-over Secret, and
// patches its Cluster itself. Other failures (throttling, timeouts) are
// errors, so that a retry asks again rather than settling for the Secret
// by accident.
func (a *credentialAPI) served(ctx context.Context) (offers, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := a.rest.Get().AbsPath("/apis/" + contentapi.Group + "/" + contentapi.Version).Do(ctx).Raw()
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return offers{}, nil
	case err != nil:
		return offers{}, err
	}
	list := &metav1.APIResourceList{}
	if err := json.Unmarshal(raw, list); err != nil {
		return offers{}, nil
	}
	var o offers
	for _, r := range list.APIResources {
		switch r.Name {
		case contentapi.CredentialResource:
			o.credential = true
		case contentapi.ClusterStatusResource:
			o.clusterStatus = true
		}
	}
	return o, nil
}

// handoverChoice records, per registration request (its clientRandom),
// what the request asked for: a retry that continues the request
// (AlreadyExists) must wait for the same hand-over, whatever discovery
// says then.
var handoverChoice sync.Map

// chooseHandover returns what the request random asks of the content API,
// deciding it on the request's first attempt.
func (a *credentialAPI) chooseHandover(ctx context.Context, random string) (offers, error) {
	if v, ok := handoverChoice.Load(random); ok {
		return v.(offers), nil
	}
	o, err := a.served(ctx)
	if err != nil {
		return offers{}, err
	}
	handoverChoice.Store(random, o)
	return o, nil
}

// forgetHandover drops the choice of request random once it is done with.
func forgetHandover(random string) { handoverChoice.Delete(random) }

// await watches for the credential of registration ns/name until it comes
// (returned), the manager refuses the registration (ErrRefused, with the
// manager's reason), the token is refused (ErrRefused) or the deadline
// passes (errNotGranted). A watch waits in the manager at no cost to the
// API server's storage; failures to start one (the manager restarting, its
// RBAC cache lagging) are retried with a growing, jittered wait. So is a
// 401 that the API server does not confirm (tokenRefused): it is the
// manager's, which cannot authenticate the aggregation layer, and
// taking it for a refused token would make the agent file a new
// registration on every retry.
func (a *credentialAPI) await(ctx context.Context, ns, name string, pollInterval time.Duration, deadline time.Time) (*contentapi.RegistrationCredential, error) {
	l := log.FromContext(ctx)
	retry := newRetryWait(pollInterval, deadline)
	for {
		timeout := max(min(time.Until(deadline), Jitter(maxWatchWait)), time.Second)
		cred, err := a.watchOnce(ctx, ns, name, timeout)
		switch {
		case cred != nil:
			return cred, nil
		case err == nil:
			// The watch ended without news: watch again.
			if time.Now().After(deadline) {
				return nil, errNotGranted
			}
			retry.reset()
			continue
		case errors.Is(err, ErrRefused):
			return nil, err
		case apierrors.IsUnauthorized(err) && a.tokenRefused(ctx):
			return nil, ErrRefused
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			l.Info("waiting for registration", "error", err.Error())
		}
		if err := retry.sleep(ctx); err != nil {
			return nil, err
		}
	}
}

// tokenRefused reports whether the API server itself refuses the token: it
// authenticates a request before it proxies it to the content API, so a
// 401 there may be either's, while its own core API (/api, which every
// authenticated user may read) answers 401 only for a token it refuses.
// Any other answer, a failure included, leaves the token accepted.
func (a *credentialAPI) tokenRefused(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return apierrors.IsUnauthorized(a.rest.Get().AbsPath("/api").Do(ctx).Error())
}

// watchOnce runs one watch of the credential: the credential, a refusal
// (wrapping ErrRefused), nil, nil when the watch ended empty, or the error
// that kept it from starting.
func (a *credentialAPI) watchOnce(ctx context.Context, ns, name string, timeout time.Duration) (*contentapi.RegistrationCredential, error) {
	// The server ends the watch after timeout; the context also ends it
	// when the server or the connection went silent.
	ctx, cancel := context.WithTimeout(ctx, timeout+requestTimeout)
	defer cancel()
	stream, err := a.rest.Get().AbsPath(contentapi.CredentialPath(ns)).
		Param("watch", "true").
		Param("fieldSelector", "metadata.name="+name).
		Param("timeoutSeconds", strconv.Itoa(int(timeout/time.Second))).
		Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stream.Close() }()
	var ev metav1.WatchEvent
	if err := json.NewDecoder(stream).Decode(&ev); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the credential watch: %w", err)
	}
	switch ev.Type {
	case "ADDED", "MODIFIED":
		cred := &contentapi.RegistrationCredential{}
		if err := json.Unmarshal(ev.Object.Raw, cred); err != nil {
			return nil, fmt.Errorf("decoding the credential: %w", err)
		}
		if cred.Token == "" || cred.DeploymentNamespace == "" {
			return nil, errors.New("the manager handed over an incomplete credential")
		}
		return cred, nil
	case "ERROR":
		st := &metav1.Status{}
		if err := json.Unmarshal(ev.Object.Raw, st); err != nil {
			return nil, fmt.Errorf("decoding the credential watch's error: %w", err)
		}
		if st.Reason == metav1.StatusReasonForbidden {
			// The manager's verdict on this registration, not RBAC's on the
			// request (that would have been a 403 before the watch began).
			return nil, &managerRefusal{reason: st.Message}
		}
		return nil, apierrors.FromObject(st)
	}
	return nil, fmt.Errorf("unexpected event %q in the credential watch", ev.Type)
}

// managerRefusal is the manager's refusal of a registration, with its
// reason (the content API hand-over tells it); it is an ErrRefused.
type managerRefusal struct{ reason string }

func (e *managerRefusal) Error() string { return ErrRefused.Error() + ": " + e.reason }
func (e *managerRefusal) Unwrap() error { return ErrRefused }
