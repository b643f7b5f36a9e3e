package register

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// errNotGranted means the deadline passed before the hand-over Secret
// appeared.
var errNotGranted = errors.New("registration not granted in time")

// maxWatchWait bounds one watch for the hand-over Secret; the agent lists
// again after it (a watch the API server or a proxy cut is also a re-list).
// An open watch is not authenticated again, so this is also how soon an
// agent whose registration token expired or was deleted meanwhile hears
// it (401 on the next list).
const maxWatchWait = time.Minute

// requestTimeout bounds one request of the registration client.
const requestTimeout = 30 * time.Second

// handoverWait says which hand-over Secret to wait for, with which
// credential (the registration token), and for how long.
type handoverWait struct {
	Config       *rest.Config
	Namespace    string
	Name         string
	PollInterval time.Duration
	Deadline     time.Time
}

// selector lists or watches the one Secret: the read grant names it.
func (w handoverWait) selector() []client.ListOption {
	return []client.ListOption{client.InNamespace(w.Namespace), client.MatchingFields{"metadata.name": w.Name}}
}

// awaitHandover returns the hand-over Secret once the manager has written
// it. Until the manager grants the token read access to that one Secret,
// each check is refused (403) and the agent polls with a growing, jittered
// wait. Once it may read it, it lists it by name and watches it from that
// list's resourceVersion: the Secret arrives the moment it is written, and
// a burst of agents waiting in the manager's queue costs the API server an
// open watch each instead of a request every few seconds.
func awaitHandover(ctx context.Context, w handoverWait) (*corev1.Secret, error) {
	l := log.FromContext(ctx)
	c, err := watchClient(w.Config)
	if err != nil {
		return nil, err
	}
	retry := newRetryWait(w.PollInterval, w.Deadline)
	for {
		list := &corev1.SecretList{}
		lctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := c.List(lctx, list, w.selector()...)
		cancel()
		if err == nil {
			if len(list.Items) > 0 {
				return &list.Items[0], nil
			}
			s, werr := watchHandover(ctx, c, w, list.ResourceVersion)
			switch {
			case s != nil:
				return s, nil
			case werr == nil && time.Now().After(w.Deadline):
				return nil, errNotGranted
			case werr == nil:
				// The watch ended (its timeout, or the connection): list again.
				continue
			}
			err = werr
		}
		switch {
		case apierrors.IsUnauthorized(err):
			return nil, ErrRefused
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
			// Not granted yet.
		default:
			l.Info("waiting for registration", "error", err.Error())
		}
		if err := retry.sleep(ctx); err != nil {
			return nil, err
		}
	}
}

// retryWait is the growing, jittered wait between two failed attempts to
// get the credential: from the poll interval up to ten times it (at most
// MaxPollWait), until the deadline.
type retryWait struct {
	first, next, max time.Duration
	deadline         time.Time
}

func newRetryWait(pollInterval time.Duration, deadline time.Time) *retryWait {
	return &retryWait{first: pollInterval, next: pollInterval, max: max(min(pollInterval*10, MaxPollWait), pollInterval), deadline: deadline}
}

// sleep waits the next wait, or returns errNotGranted past the deadline
// and ctx's error when it ends.
func (r *retryWait) sleep(ctx context.Context) error {
	if time.Now().After(r.deadline) {
		return errNotGranted
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(Jitter(r.next)):
	}
	r.next = min(r.next*2, r.max)
	return nil
}

// reset starts over from the first wait (an attempt got through).
func (r *retryWait) reset() { r.next = r.first }

// watchHandover watches the one Secret from resourceVersion rv until it is
// added (returned) or the watch ends (nil, nil).
func watchHandover(ctx context.Context, c client.WithWatch, w handoverWait, rv string) (*corev1.Secret, error) {
	timeout := max(min(time.Until(w.Deadline), Jitter(maxWatchWait)), time.Second)
	seconds := int64(timeout / time.Second)
	// The server ends the watch after timeout; the context also ends it
	// when the server or the connection went silent.
	ctx, cancel := context.WithTimeout(ctx, timeout+requestTimeout)
	defer cancel()
	opts := append([]client.ListOption{&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &seconds}}},
		w.selector()...)
	wi, err := c.Watch(ctx, &corev1.SecretList{}, opts...)
	if err != nil {
		return nil, err
	}
	defer wi.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return nil, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if s, isSecret := ev.Object.(*corev1.Secret); isSecret && s.Name == w.Name {
					return s, nil
				}
			case watch.Error:
				if st, isStatus := ev.Object.(*metav1.Status); isStatus {
					return nil, apierrors.FromObject(st)
				}
				return nil, fmt.Errorf("watching the registration secret: %v", ev.Object)
			}
		}
	}
}

// watchClient is the registration client without the request timeout of
// the other calls, which would cut every watch after that long.
func watchClient(cfg *rest.Config) (client.WithWatch, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0
	return upstreamClient(cfg)
}
