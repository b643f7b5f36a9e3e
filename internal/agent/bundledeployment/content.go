package bundledeployment

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/manifest"
)

// contentRetry is how long a deployment whose Content (or values Secret)
// could not be read because the API server is overloaded or unreachable
// waits before it reads again (jittered). It is fixed: the overload is not
// the deployment's fault, and a growing backoff would leave it idle for
// minutes after the overload passed.
const contentRetry = 15 * time.Second

// ContentRetryAfter is the jittered wait before reading a Content (or
// values Secret) again after a ContentUnavailableError. The simulated
// agents use it too.
func ContentRetryAfter() time.Duration {
	return jitter(contentRetry)
}

// ContentUnavailableError says that an input of a deploy, its Content or
// its values Secret, could not be read for a reason that passes by itself
// (see TransientContentError): the deploy waits for it (WaitingForContent)
// and reads it again shortly, whichever input it was. Its message names
// the input and a fixed description of the cause, never the underlying
// error's text, so that it is safe for status and stays the same from one
// retry to the next (no status write per retry).
type ContentUnavailableError struct {
	// Kind is what could not be read when it is not the Content:
	// KindValuesSecret. ID is its name (the Content's, the Secret's).
	Kind  string
	ID    string
	Cause string
	Err   error
}

// KindValuesSecret is the ContentUnavailableError.Kind of a values Secret
// read.
const KindValuesSecret = "values Secret"

func (e *ContentUnavailableError) Error() string {
	return fmt.Sprintf("%s %s could not be read (%s); retrying in about %s", e.kind(), e.ID, e.Cause, contentRetry)
}

func (e *ContentUnavailableError) kind() string {
	if e.Kind == "" {
		return "content"
	}
	return e.Kind
}

func (e *ContentUnavailableError) Unwrap() error { return e.Err }

// ReadManifest reads and decodes the Content bd's deploymentID names, as
// seen from bd's namespace (RetryFreshContent covers a grant that lags).
// A read that failed because the API server is overloaded or unreachable
// is a *ContentUnavailableError; a Content that cannot be decoded wraps
// deployer.ErrRender. The real and the simulated agents both read
// Contents through it.
func ReadManifest(ctx context.Context, contents *contentapi.Reader, bd *fleet.BundleDeployment) (*manifest.Manifest, error) {
	id := manifest.ManifestIDOf(bd.Spec.DeploymentID)
	var content []byte
	err := RetryFreshContent(ctx, func() error {
		var err error
		content, _, err = contents.Get(ctx, bd.Namespace, id, bd.Name)
		return err
	})
	if err != nil {
		if unavailable := asUnavailable(ctx, "", id, err); unavailable != nil {
			return nil, unavailable
		}
		return nil, fmt.Errorf("reading content %s: %w", id, err)
	}
	m, err := manifest.FromCompressed(content)
	if err != nil {
		return nil, fmt.Errorf("%w: content %s: %v", deployer.ErrRender, id, err)
	}
	return m, nil
}

// asUnavailable is err, from reading the input kind/id of a deploy (see
// ContentUnavailableError) with the context ctx, as a
// *ContentUnavailableError when it passes by itself, and nil otherwise.
func asUnavailable(ctx context.Context, kind, id string, err error) *ContentUnavailableError {
	cause, ok := TransientContentError(ctx, err)
	if !ok {
		return nil
	}
	return &ContentUnavailableError{Kind: kind, ID: id, Cause: cause, Err: err}
}

// TransientContentError tells whether err, from reading a Content with the
// context parent, is the API server (or the content API behind it) being
// overloaded or unreachable, and returns a short fixed description of the
// cause. A context that ended because parent ended is not transient: the
// agent is stopping. A 403 or 404 (the Content is missing or not granted,
// after RetryFreshContent's retries) and anything else are not either.
func TransientContentError(parent context.Context, err error) (cause string, ok bool) {
	if err == nil || parent.Err() != nil {
		return "", false
	}
	var status apierrors.APIStatus
	switch {
	case apierrors.IsTooManyRequests(err):
		return "API server busy: 429 Too Many Requests", true
	case apierrors.IsServerTimeout(err):
		return "API server timeout", true
	case apierrors.IsTimeout(err):
		return "gateway timeout: 504", true
	case apierrors.IsServiceUnavailable(err):
		return "service unavailable: 503", true
	case errors.As(err, &status) && status.Status().Code == http.StatusBadGateway:
		return "bad gateway: 502", true
	case errors.As(err, &status):
		// Any other answer of the API server is an answer, not a failure
		// to reach it.
		return "", false
	case errors.Is(err, context.DeadlineExceeded), utilnet.IsTimeout(err):
		return "request timed out", true
	case utilnet.IsConnectionRefused(err):
		return "connection refused", true
	case utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err), utilnet.IsHTTP2ConnectionLost(err):
		return "connection lost", true
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) {
		return "API server unreachable", true
	}
	return "", false
}

// waitUnavailable makes bd's deploy wait when err, from reading one of its
// inputs, is a *ContentUnavailableError: Ready False with
// ReasonWaitingContent, read again after the short fixed wait, no failure
// counted (not the deployment's fault). ok tells whether it did; any other
// err is the caller's to handle.
func (r *Reconciler) waitUnavailable(ctx context.Context, bd *fleet.BundleDeployment, err error) (res ctrl.Result, ok bool) {
	unavailable := (*ContentUnavailableError)(nil)
	if !errors.As(err, &unavailable) {
		return ctrl.Result{}, false
	}
	ctrl.LoggerFrom(ctx).V(1).Info("deploy input unavailable, retrying shortly",
		"input", unavailable.kind(), "name", unavailable.ID, "error", unavailable.Err.Error())
	setWaiting(bd, ReasonWaitingContent, unavailable.Error())
	key := types.NamespacedName{Namespace: bd.Namespace, Name: bd.Name}
	return ctrl.Result{RequeueAfter: r.recordContentWait(key, attemptID(bd))}, true
}

// contentWait is a deploy attempt waiting to read its Content (or values
// Secret) again.
type contentWait struct {
	attempt string
	until   time.Time
}

// contentWaitRemaining is how long the attempt (attemptID) of key must
// still wait before its inputs are read again: events in between (a drift
// event of what is deployed) do not add reads to an overloaded API server.
func (r *Reconciler) contentWaitRemaining(key types.NamespacedName, attempt string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.contentWaits[key]
	if !ok || w.attempt != attempt {
		return 0
	}
	return time.Until(w.until)
}

// recordContentWait schedules the next read of the attempt's inputs and
// returns the wait. It leaves the failure backoff alone: a deploymentID
// that really fails keeps its count, neither reset nor grown by an
// overload.
func (r *Reconciler) recordContentWait(key types.NamespacedName, attempt string) time.Duration {
	d := ContentRetryAfter()
	r.mu.Lock()
	r.contentWaits[key] = contentWait{attempt: attempt, until: time.Now().Add(d)}
	r.mu.Unlock()
	return d
}
