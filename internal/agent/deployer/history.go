package deployer

// Release history: what a deploy reads of a release's stored revisions,
// and the rollback that corrects drift.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/client-go/rest"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/names"
)

func (d *Deployer) lastRelease(ac *action.Configuration, name string) (*release.Release, error) {
	r, err := ac.Releases.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return asV1(r)
}

func purgeHistory(ac *action.Configuration, name string) error {
	hist, err := ac.Releases.History(name)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return err
	}
	for _, h := range hist {
		r, err := asV1(h)
		if err != nil {
			return err
		}
		if _, err := ac.Releases.Delete(r.Name, r.Version); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
			return err
		}
	}
	return nil
}

// restorable is the revision drift correction restores: the deployed one,
// or, after a failed rollback kept by keepFailHistory (which leaves no
// deployed revision), the newest superseded one, so correction resumes once
// whatever made it fail is gone.
func restorable(ac *action.Configuration, name string) (*release.Release, error) {
	cur, err := ac.Releases.Deployed(name)
	if err == nil {
		return asV1(cur)
	}
	if !errors.Is(err, driver.ErrNoDeployedReleases) {
		return nil, err
	}
	hist, herr := ac.Releases.History(name)
	if herr != nil {
		return nil, err
	}
	var best *release.Release
	for _, h := range hist {
		r, cerr := asV1(h)
		if cerr != nil {
			return nil, cerr
		}
		if r.Info.Status == rcommon.StatusSuperseded && (best == nil || r.Version > best.Version) {
			best = r
		}
	}
	if best == nil {
		return nil, err
	}
	return best, nil
}

// mayBeCutName reports whether label, a bundle-id storage label, may be a
// BundleDeployment name names.Limit cut to maxLabelValue characters: 57
// characters kept, "-" (unless they end in one) and 5 hex digits, so 62 or
// 63 characters ending in "-" and 5 lower-case hex digits. Any other label
// is the full name.
func mayBeCutName(label string) bool {
	if len(label) < maxLabelValue-1 || len(label) > maxLabelValue {
		return false
	}
	tail := label[len(label)-6:]
	if tail[0] != '-' {
		return false
	}
	for _, c := range tail[1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// resolveCut is full, the BundleDeployment a revision's chart records, when
// label, its storage label, is full cut (or full itself); otherwise no
// name, and label as unresolved.
func resolveCut(full, label string) (name, unresolved string) {
	if full == "" || names.Limit(full, maxLabelValue) != label {
		return "", label
	}
	return full, ""
}

// decodeStored decodes a stored revision, data being the "release" key of
// its storage Secret, in Helm's encoding: base64 of gzip, or of plain JSON
// for revisions stored before Helm compressed them.
func decodeStored(data []byte) (*release.Release, error) {
	raw, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return nil, err
	}
	if len(raw) > 3 && bytes.Equal(raw[:3], []byte{0x1f, 0x8b, 0x08}) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, err
		}
	}
	rel := &release.Release{}
	if err := json.Unmarshal(raw, rel); err != nil {
		return nil, err
	}
	return rel, nil
}

func asV1(r ri.Releaser) (*release.Release, error) {
	switch v := r.(type) {
	case *release.Release:
		return v, nil
	case release.Release:
		return &v, nil
	}
	return nil, fmt.Errorf("unsupported release type %T", r)
}

func toRelease(r ri.Releaser) (*Release, error) {
	v1, err := asV1(r)
	if err != nil {
		return nil, err
	}
	objs, err := ObjectsOf(v1.Manifest)
	if err != nil {
		return nil, err
	}
	rel := &Release{Name: v1.Name, Namespace: v1.Namespace, Version: v1.Version, Objects: objs}
	if v1.Chart != nil && v1.Chart.Metadata != nil {
		rel.DeploymentID = v1.Chart.Metadata.Annotations[DeploymentIDAnnotation]
	}
	return rel, nil
}

// Current returns the deployed revision of a release when it is the
// newest, or nil when there is none. A newer revision that failed (or was
// interrupted, pending) also makes it nil: that attempt may have applied
// part of its objects, so the deployed revision no longer describes what
// is in the cluster, and a caller whose spec names the deployed revision's
// deploymentID (a reverted commit) must deploy it again rather than adopt
// it. Revisions of it stored before the agent signed its releases are
// adopted first (see adopt): after an upgrade of the agent, this is the
// first look at each BundleDeployment's release.
//
// Every request it makes ends with ctx (boundActionConfig): the reconcile
// that asks must be able to give up on a stalled downstream API server,
// e.g. when the agent lost its lease and another process reconciles.
func (d *Deployer) Current(ctx context.Context, bdName string, opts fleet.BundleDeploymentOptions) (_ *Release, err error) {
	defer func() { err = endedBy(ctx, err) }()
	ac, err := d.boundActionConfig(ctx, ReleaseNamespace(opts), opts.ServiceAccount)
	if err != nil {
		return nil, err
	}
	if err := d.adopt(ctx, ac, bdName, ReleaseName(bdName, opts)); err != nil {
		return nil, err
	}
	r, err := ac.Releases.Deployed(ReleaseName(bdName, opts))
	if errors.Is(err, driver.ErrReleaseNotFound) || errors.Is(err, driver.ErrNoDeployedReleases) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cur, err := asV1(r)
	if err != nil {
		return nil, err
	}
	if otherOwner(cur, bdName) != "" {
		// Another BundleDeployment's release under the same name (a
		// shared releaseName, which Deploy refuses): not this one's.
		return nil, nil
	}
	last, err := d.lastRelease(ac, cur.Name)
	if err != nil {
		return nil, err
	}
	if last != nil && last.Version > cur.Version {
		return nil, nil
	}
	return toRelease(cur)
}

// CorrectDrift restores the objects of the deployed release by rolling back
// to its current revision (which re-applies it and re-creates deleted
// objects). Unless keepFailHistory, a failed attempt leaves no revision.
// Only a revision the agent wrote is restored: the storage it reads shows
// Helm no other (releaseStore).
//
// The rollback ends with ctx, and at the latest after rollbackDeadline:
// Helm's Rollback takes no context, so every request of it (storage,
// apply, hook waits) is bound to ctx (boundActionConfig) and its waits
// get ctx too. A reconcile that gives up (the agent lost its lease, the
// downstream API server stalls) thus stops touching the release instead
// of rolling it back behind the back of the process that took over. A
// rollback cut short leaves its revision pending, as an agent restart
// does; the next deploy of the release marks it failed and upgrades.
func (d *Deployer) CorrectDrift(ctx context.Context, bdName string, opts fleet.BundleDeploymentOptions, cd fleet.CorrectDrift) error {
	wait, deadline := rollbackTimeouts(opts.Helm)
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	// Told before cancel runs: only a rollback that ran out of rctx
	// (the caller gave up, or the deadline passed) says it ended.
	return endedBy(rctx, d.rollBack(rctx, wait, bdName, opts, cd))
}

// rollBack is CorrectDrift's rollback under ctx, waiting up to wait for
// each hook.
func (d *Deployer) rollBack(ctx context.Context, wait time.Duration, bdName string, opts fleet.BundleDeploymentOptions, cd fleet.CorrectDrift) error {
	ns, name := ReleaseNamespace(opts), ReleaseName(bdName, opts)
	sa, err := d.serviceAccount(ctx, opts.ServiceAccount)
	if err != nil {
		return err
	}
	ac, err := d.boundActionConfig(ctx, ns, sa)
	if err != nil {
		return err
	}
	// Under the release's lock (releaseLocks), and only while the
	// release is still bdName's: another BundleDeployment may have taken
	// it over since the drift was seen.
	unlock, err := d.lockRelease(ctx, ns, name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := d.adopt(ctx, ac, bdName, name); err != nil {
		return err
	}
	last, err := d.lastRelease(ac, name)
	if err != nil {
		return err
	}
	if owner := otherOwner(last, bdName); owner != "" {
		return &ReleaseOwnedError{Release: name, Namespace: ns, Owner: owner}
	}
	v1, err := restorable(ac, name)
	if err != nil {
		return err
	}
	rb := action.NewRollback(ac)
	rb.Version = v1.Version
	rb.MaxHistory = maxHistory(opts.Helm)
	rb.WaitStrategy = kube.HookOnlyStrategy
	rb.Timeout = wait
	rb.WaitOptions = []kube.WaitOption{kube.WithWaitContext(ctx)}
	rb.ServerSideApply = "true"
	rb.ForceConflicts = true
	if cd.Force {
		rb.ForceReplace, rb.ServerSideApply, rb.ForceConflicts = true, "false", false
	}
	rbErr := rb.Run(name)
	if rbErr != nil && !cd.KeepFailHistory {
		if last, err := d.lastRelease(ac, name); err == nil && last != nil &&
			last.Version > v1.Version && last.Info.Status == rcommon.StatusFailed {
			_, _ = ac.Releases.Delete(name, last.Version)
			// Make the revision we rolled back from current again.
			v1.Info.Status = rcommon.StatusDeployed
			_ = ac.Releases.Update(v1)
		}
	}
	return rbErr
}

// defaultHookTimeout is how long a rollback's hooks are waited for when
// the bundle sets no helm.timeoutSeconds: what Deploy waits for the hooks
// of an install or upgrade.
const defaultHookTimeout = 5 * time.Minute

// rollbackSlack is what a rollback may take beyond its hook waits: its
// storage reads and writes and the apply of the release's objects.
const rollbackSlack = time.Minute

// rollbackTimeouts are how long a drift correction's rollback waits for
// each of its hooks (helm.timeoutSeconds, else defaultHookTimeout) and how
// long it may take in all: the pre- and post-rollback hooks may each wait
// that long, plus rollbackSlack. Without the bound a rollback against a
// downstream API server that accepts connections but never answers would
// hold the BundleDeployment's lock for good.
func rollbackTimeouts(h *fleet.HelmOptions) (wait, deadline time.Duration) {
	wait = defaultHookTimeout
	if h != nil && h.TimeoutSeconds > 0 {
		wait = time.Duration(h.TimeoutSeconds) * time.Second
	}
	return wait, 2*wait + rollbackSlack
}

// boundActionConfig is actionConfig for an action every request of which
// ends with ctx. Helm's actions and its storage driver take no context
// (Rollback has none at all; the storage driver, hence releaseStore, uses
// context.Background), so the context is put where all of them go
// through: the transport of the REST config, from which both the kube
// client and the release storage are built (actionConfigOn).
func (d *Deployer) boundActionConfig(ctx context.Context, namespace, serviceAccount string) (*action.Configuration, error) {
	ac, _, err := d.actionConfigOn(ctx, namespace, untilDone(ctx, d.restConfigFor(serviceAccount)))
	return ac, err
}

// untilDone is a copy of cfg whose requests end when ctx does: none is
// sent once ctx is done, and one under way is cancelled then.
func untilDone(ctx context.Context, cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &ctxTransport{ctx: ctx, rt: rt} })
	return cfg
}

// ctxTransport ends each request with ctx as well as with its own context.
type ctxTransport struct {
	ctx context.Context
	rt  http.RoundTripper
}

func (t *ctxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.ctx.Err(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(t.ctx, func() { cancel(t.ctx.Err()) })
	resp, err := t.rt.RoundTrip(req.WithContext(rctx))
	if err != nil {
		stop()
		cancel(nil)
		return nil, err
	}
	// The body is read after RoundTrip returns (a watch, for as long as
	// it lasts): the request ends when the body is closed.
	resp.Body = &closeFunc{ReadCloser: resp.Body, done: func() { stop(); cancel(nil) }}
	return resp, nil
}

type closeFunc struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (c *closeFunc) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(c.done)
	return err
}

// endedBy makes err, returned by an action whose context ended, say so
// (errors.Is context.Canceled or DeadlineExceeded), whatever Helm made of
// the failed requests: the caller tells giving up from failing by it.
func endedBy(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w: %w", ctx.Err(), err)
}
