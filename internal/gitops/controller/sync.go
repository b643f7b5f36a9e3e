package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/bundlereader"
	bundlectl "github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/gitops/git"
	"github.com/fleetgo/fleet/internal/gitops/poll"
	"github.com/fleetgo/fleet/internal/metrics"
)

func metaNow() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

// pollAndSync checks the remote when a poll is due and syncs when the
// commit, the spec or forceSyncGeneration changed. It returns the outcome to
// show and when to come back. The namespace's GitRepoRestrictions are
// checked first, on every reconcile and before any network call.
func (r *Reconciler) pollAndSync(ctx context.Context, repo *fleet.GitRepo) (syncOutcome, time.Duration) {
	key := client.ObjectKeyFromObject(repo)
	interval := poll.Interval(repo.Spec.PollingInterval)
	stamp := [2]int64{repo.Generation, repo.Spec.ForceSyncGeneration}

	r.mu.Lock()
	last, seen := r.last[key]
	specNew := r.attempted[key] != stamp && (repo.Status.ObservedGeneration != repo.Generation ||
		repo.Status.UpdateGeneration != repo.Spec.ForceSyncGeneration)
	r.mu.Unlock()

	authorized, err := r.authorize(ctx, repo)
	if err != nil {
		return r.refuse(key, repo, interval, err)
	}
	// Refused until now: the GitRepo or its restrictions changed, so it is
	// polled at once instead of when the timer says.
	wasRefused := seen && last.SyncReason == ReasonRestricted
	// A default of the restrictions or Policies changed since the last
	// sync: the Bundles are built again at once, with the new one.
	// It bypasses the timer once per new grant (grantTried): while the
	// rebuild keeps failing, its backoff applies, and each due rebuild
	// uses the new grant (retrySync) until one succeeds.
	grant := [2]string{authorized.Spec.ServiceAccount, authorized.Spec.ClientSecretName}
	r.mu.Lock()
	prevGrant, synced := r.granted[key]
	grantChanged := synced && prevGrant != grant
	grantNew := grantChanged && r.grantTried[key] != grant
	r.mu.Unlock()

	due, wait := r.Opts.Tracker.Due(key)
	webhookNew := r.webhookPending(repo)
	if repo.Spec.DisablePolling && seen && last.PollErr == nil {
		// Without polling the timer only retries failures (a failed
		// build: below).
		due = false
		wait = 0
	}
	// A failed build is retried on its own backoff (rebuild), while the
	// ref lookup goes on every interval: a new commit is built as soon as
	// it is seen, the failing one is not rebuilt in a hot loop. While the
	// ref lookup itself fails, its own backoff rules.
	failed, buildFailed := r.Opts.Tracker.FailedSync(key)
	rebuild := buildFailed && !(seen && last.PollErr != nil)
	if rebuild && failed.Wait <= 0 {
		due = true
	} else if rebuild && !due && (wait == 0 || failed.Wait < wait) {
		wait = failed.Wait
	}
	// A Bundle of the applied commit was deleted by hand: git says it
	// should exist, so the commit is built again at once rather than at
	// the next commit (as a HelmOp recreates its Bundle). So is a commit
	// whose Bundles, found after a restart, do not match their build
	// record (one deleted, or a default changed, while the manager was
	// down). Like a new grant it bypasses the timer once per set of gone
	// Bundles (goneTried): while that rebuild fails, its backoff applies.
	gone := strings.Join(r.goneBundles(ctx, repo, grant), ",")
	r.mu.Lock()
	goneNew := gone != "" && r.goneTried[key] != gone
	r.mu.Unlock()
	if !due && !specNew && !webhookNew && !wasRefused && !grantNew && !goneNew && seen {
		last.PollingDisabled = repo.Spec.DisablePolling
		return last, wait
	}

	out := syncOutcome{PollingDisabled: repo.Spec.DisablePolling}
	r.mu.Lock()
	r.attempted[key] = stamp
	r.grantTried[key] = grant
	r.goneTried[key] = gone
	r.mu.Unlock()

	retrySync := (seen && last.SyncErr != nil) || grantChanged || buildFailed || gone != ""
	err = r.poll(ctx, repo, authorized, attempt{retrySync: retrySync, grant: grant}, &out)
	// Only a failed ref lookup (or an unusable spec) backs the poll off;
	// a failed build has its own schedule (RecordSync in poll).
	next := r.Opts.Tracker.Record(key, interval, err)
	r.mu.Lock()
	r.last[key] = out
	if err == nil && out.SyncErr == nil {
		r.granted[key] = grant
		// Rebuilt: a later deletion of the same Bundles is new again.
		delete(r.goneTried, key)
	}
	r.mu.Unlock()
	if failed, ok := r.Opts.Tracker.FailedSync(key); ok && err == nil && out.SyncErr != nil {
		// Come back when the failing build may be tried again (or at the
		// next poll, if sooner).
		retry := failed.Wait
		if retry <= 0 {
			retry = interval
		}
		if repo.Spec.DisablePolling {
			return out, retry
		}
		return out, min(next, retry)
	}
	if repo.Spec.DisablePolling && err == nil {
		return out, 0
	}
	return out, next
}

// refuse records a GitRepo its GitRepoRestrictions refuse, or whose
// restrictions could not be read, without any network call. A refusal is
// not retried on a timer: a change of the GitRepo or of a restriction
// brings it back (both are watched). Nothing the GitRepo deployed before is
// touched.
func (r *Reconciler) refuse(key client.ObjectKey, repo *fleet.GitRepo, interval time.Duration, err error) (syncOutcome, time.Duration) {
	out := syncOutcome{PollingDisabled: repo.Spec.DisablePolling}
	var next time.Duration
	if isRestricted(err) {
		out.SyncErr, out.SyncReason, out.Stalled = err, ReasonRestricted, true
	} else {
		out.PollErr, out.SyncReason = err, ReasonPollFailed
		next = r.Opts.Tracker.Record(key, interval, err)
	}
	r.mu.Lock()
	r.last[key] = out
	r.mu.Unlock()
	return out, next
}

// attempt is what pollAndSync asks of poll.
type attempt struct {
	// retrySync rebuilds the commit even when the status says it is
	// applied (the last sync failed, the grant changed, or Bundles of
	// the commit are gone).
	retrySync bool
	// grant is the service account and client Secret the build uses.
	grant [2]string
}

// buildInput names what a sync builds: the commit, the spec generation and
// forceSyncGeneration, and the service account and client Secret it builds
// with. A failed build is retried at once when any of them changes, on the
// rebuild backoff otherwise (for a change elsewhere: a Secret's content,
// a chart repository that came back).
func buildInput(commit string, repo *fleet.GitRepo, grant [2]string) string {
	return fmt.Sprintf("%s|%d|%d|%s|%s", commit, repo.Generation, repo.Spec.ForceSyncGeneration, grant[0], grant[1])
}

// poll does the ref lookup and, when needed, the sync (also when the last
// sync failed: it is retried on its rebuild backoff). The returned error is
// the ref lookup's, which drives the polling backoff; a sync failure is
// recorded with Tracker.RecordSync instead, so that it never delays the
// lookup that finds the fix. out carries what the user should see.
// authorized is repo as authorize returned it (the default client Secret
// filled in): the remote is built from it, everything else from repo.
func (r *Reconciler) poll(ctx context.Context, repo, authorized *fleet.GitRepo, a attempt, out *syncOutcome) error {
	remote, err := remoteFor(ctx, r.APIReader, authorized, r.Opts)
	if err != nil {
		out.PollErr = err
		out.Stalled, out.SyncReason = isInputError(err), ReasonInvalidSpec
		return err
	}
	start := time.Now()
	ref, err := git.LatestRef(ctx, remote)
	commit := ref.Commit
	metrics.ObserveGitFetch(repo.Namespace, repo.Name, time.Since(start), err)
	if err != nil {
		out.PollErr = err
		out.Stalled = git.IsPermanent(err)
		out.SyncReason = ReasonPollFailed
		return err
	}
	if repo.Status.PollingCommit != commit {
		repo.Status.PollingCommit = commit
		now := metaNow()
		repo.Status.LastPollingTime = &now
	}
	upToDate := commit == repo.Status.Commit &&
		repo.Status.ObservedGeneration == repo.Generation &&
		repo.Status.UpdateGeneration == repo.Spec.ForceSyncGeneration &&
		!a.retrySync
	if upToDate {
		return nil
	}
	key := client.ObjectKeyFromObject(repo)
	input := buildInput(commit, repo, a.grant)
	if f, ok := r.Opts.Tracker.FailedSync(key); ok && f.Input == input && f.Wait > 0 {
		// The same build failed and its backoff has not run out: that
		// failure stands.
		setSyncErr(out, f.Err)
		return nil
	}
	err = r.sync(ctx, repo, remote, ref, a.grant)
	r.Opts.Tracker.RecordSync(key, poll.Interval(repo.Spec.PollingInterval), input, err)
	if err != nil {
		setSyncErr(out, err)
	}
	return nil
}

// setSyncErr shows a failed sync in out.
func setSyncErr(out *syncOutcome, err error) {
	out.SyncErr = err
	var se *syncError
	if errors.As(err, &se) {
		out.SyncReason, out.Stalled = se.reason, se.stalled
	}
}

// syncError carries the condition reason and whether the input is at fault.
type syncError struct {
	reason  string
	stalled bool
	err     error
}

func (e *syncError) Error() string { return e.err.Error() }
func (e *syncError) Unwrap() error { return e.err }

func isInputError(err error) bool {
	var ie *inputError
	return errors.As(err, &ie)
}

// isReadInputError tells a bundlereader failure that only a change of the
// commit or of the GitRepo can fix (Stalled) from one that a retry may fix
// (Reconciling): a chart repository, registry or git host that cannot be
// reached for now. The bundlereader types the first kind only in part
// (bundlereader.IsInvalidInput, the HelmOp controller's input errors);
// most of a GitRepo's input errors (a missing path, a template that does
// not render, a chart repository answering 401 or 404) are untyped, so
// everything not recognisably transient counts as input.
func isReadInputError(err error) bool {
	return bundlereader.IsInvalidInput(err) || !isTransientNetError(err)
}

// isTransientNetError reports an error of the network rather than of what
// was asked: a refused or reset connection, a DNS failure, a timeout, or a
// connection closed before the answer. A certificate the client does not
// trust is not one: it needs a caBundle (or the server's fix).
func isTransientNetError(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		badHost   x509.HostnameError
		badCert   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &badHost) || errors.As(err, &badCert) || errors.As(err, &verify) {
		return false
	}
	var (
		op      *net.OpError
		dns     *net.DNSError
		netErr  net.Error
		request *url.Error
	)
	switch {
	case bundlereader.IsTemporary(err):
		// A chart repository or registry answering 5xx, 429 or 408.
		return true
	case errors.As(err, &op), errors.As(err, &dns):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	case errors.As(err, &request) && (errors.Is(request.Err, io.EOF) || errors.Is(request.Err, io.ErrUnexpectedEOF)):
		// The server closed the connection before it answered.
		return true
	}
	return false
}

// isRejected reports a Bundle (or its values Secret) the API server
// refused as invalid (422, e.g. a value its CRD schema does not allow) or
// malformed (400), values apply cannot store, or a bundle name another
// GitRepo's Bundle holds: input errors, which writing the same Bundle
// again will not fix.
func isRejected(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		errors.Is(err, apply.ErrInvalidValues) || errors.Is(err, apply.ErrOwnedByOther)
}

// sync fetches commit, builds its Bundles and applies them, each with
// the record of the build (names and grant: stampBuild). Nothing is
// written unless every bundle of the commit was built, so a broken commit
// leaves the previous Bundles (and deployments) untouched.
func (r *Reconciler) sync(ctx context.Context, repo *fleet.GitRepo, remote git.Remote, ref git.Ref, grant [2]string) error {
	commit := ref.Commit
	log := ctrl.LoggerFrom(ctx)
	dir, err := os.MkdirTemp("", "fleet-gitrepo-")
	if err != nil {
		return &syncError{reason: ReasonFetchFailed, err: err}
	}
	defer func() { _ = os.RemoveAll(dir) }()

	fetchRemote := remote
	fetchRemote.Timeout = 4 * r.Opts.GitTimeout
	fetched, err := git.Fetch(ctx, fetchRemote, dir, git.FetchOptions{Commit: commit, Ref: ref.Name, Limits: r.Opts.CheckoutLimits})
	if err != nil {
		return &syncError{reason: ReasonFetchFailed, stalled: git.IsPermanent(err), err: fmt.Errorf("fetching %s: %w", short(commit), err)}
	}
	auth, byPath, err := helmAuth(ctx, r.APIReader, repo, remote.Credentials.KnownHosts, r.Opts.SystemNamespace)
	if err != nil {
		return &syncError{reason: ReasonInvalidSpec, stalled: isInputError(err), err: err}
	}
	opts := readerOptions(repo, fetched, auth, byPath, r.Opts.BundleLimits)
	var warnings []string
	opts.Warn = func(msg string) {
		log.Info("bundle warning", "gitrepo", repo.Name, "warning", msg)
		warnings = append(warnings, msg)
	}
	source := filepath.Join(dir, "source")
	var bundles []*fleet.Bundle
	if len(repo.Spec.Bundles) > 0 {
		// A driven scan: the listed directories replace paths.
		bundles, err = bundlereader.ReadDriven(ctx, repo.Name, source, repo.Spec.Bundles, opts)
	} else {
		bundles, err = bundlereader.Read(ctx, repo.Name, source, repo.Spec.Paths, opts)
	}
	if err != nil {
		return &syncError{reason: ReasonBuildFailed, stalled: isReadInputError(err), err: fmt.Errorf("commit %s: %w", short(fetched), err)}
	}
	stampBuild(repo, bundles, grant)
	res, err := apply.ApplyWithResult(ctx, r.Client, bundles, apply.Options{
		Namespace:     repo.Namespace,
		PruneSelector: map[string]string{fleet.RepoLabel: repo.Name},
		Reader:        r.APIReader,
	})
	// Before the deletions' events come back: what this apply pruned must
	// not look deleted by hand (goneBundles).
	r.recordBuilt(repo, bundles, res, err)
	if err != nil {
		if isRejected(err) {
			// The API server refused a Bundle as built from this commit:
			// writing it again cannot help until the commit or the
			// GitRepo changes (retried only on the rebuild backoff).
			return &syncError{reason: ReasonApplyFailed, stalled: true, err: fmt.Errorf("applying bundles of %s: %w", short(fetched), err)}
		}
		return &syncError{reason: ReasonApplyFailed, err: fmt.Errorf("applying bundles of %s: %w", short(fetched), err)}
	}
	r.warnBuild(repo, fetched, warnings)
	repo.Status.Commit = fetched
	repo.Status.ObservedGeneration = repo.Generation
	repo.Status.UpdateGeneration = repo.Spec.ForceSyncGeneration
	log.V(1).Info("synced", "gitrepo", client.ObjectKeyFromObject(repo), "commit", fetched, "bundles", len(bundles))
	return nil
}

// maxWarnings is how many bundle warnings one event lists.
const maxWarnings = 5

// warnBuild records the warnings of a build that was applied (unknown
// fleet.yaml keys, ignored imageScans) as one event, so that they reach
// the user and not only the manager's log; a sync happens once per new
// commit or spec change, so this is not repeated on every poll.
func (r *Reconciler) warnBuild(repo *fleet.GitRepo, commit string, warnings []string) {
	if r.Recorder == nil || len(warnings) == 0 {
		return
	}
	shown := warnings[:min(len(warnings), maxWarnings)]
	msg := fmt.Sprintf("commit %s: %s", short(commit), strings.Join(shown, "; "))
	if len(warnings) > maxWarnings {
		msg += fmt.Sprintf("; and %d more", len(warnings)-maxWarnings)
	}
	r.Recorder.Eventf(repo, nil, corev1.EventTypeWarning, "BundleWarnings", "Build", "%s", msg)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// emitEvents records events only for changes: a new commit applied, a new
// failure (or a different one), and recovery from a failure.
func (r *Reconciler) emitEvents(old, repo *fleet.GitRepo) {
	if r.Recorder == nil {
		return
	}
	events := eventsFor(&old.Status, &repo.Status)
	if repo.Spec.OCIRegistrySecret != "" && repo.Status.Commit != "" && repo.Status.Commit != old.Status.Commit {
		// Said with every applied commit, so that it is seen: the field is
		// accepted for compatibility but changes nothing.
		events = append(events, eventInfo{typ: corev1.EventTypeWarning, reason: "OCIStorageUnsupported",
			msg: "spec.ociRegistrySecret is ignored: bundle contents are stored once as Content resources in this cluster"})
	}
	if (repo.Spec.ImageScanInterval != nil || repo.Spec.ImageScanCommit != nil) && repo.Status.Commit != "" && repo.Status.Commit != old.Status.Commit {
		events = append(events, eventInfo{typ: corev1.EventTypeWarning, reason: "ImageScanUnsupported",
			msg: "spec.imageScanInterval and spec.imageScanCommit are ignored: image scanning is not implemented"})
	}
	for _, e := range events {
		r.Recorder.Eventf(repo, nil, e.typ, e.reason, e.reason, "%s", e.msg)
	}
}

type eventInfo struct{ typ, reason, msg string }

// failureReasons are Ready reasons that mean the last attempt failed.
var failureReasons = map[string]bool{
	ReasonPollFailed: true, ReasonFetchFailed: true, ReasonBuildFailed: true,
	ReasonApplyFailed: true, ReasonInvalidSpec: true, ReasonRestricted: true,
	// A Bundle the Bundle controller rejected whole (its Stalled reason
	// becomes the GitRepo's, see failedMessage).
	bundlectl.ReasonInvalid: true, ReasonBundleFailed: true, bundlectl.ReasonInvalidName: true,
	bundlectl.ReasonInvalidClusterGroup: true, bundlectl.ReasonInvalidMapping: true,
}

// eventsFor compares two statuses and names the events a user should see.
func eventsFor(old, cur *fleet.GitRepoStatus) []eventInfo {
	var out []eventInfo
	if cur.Commit != "" && cur.Commit != old.Commit {
		out = append(out, eventInfo{typ: corev1.EventTypeNormal, reason: "GotNewCommit", msg: "applied commit " + cur.Commit})
	}
	oc := meta.FindStatusCondition(old.Conditions, fleet.ConditionReady)
	nc := meta.FindStatusCondition(cur.Conditions, fleet.ConditionReady)
	wasFailing := oc != nil && failureReasons[oc.Reason]
	isFailing := nc != nil && failureReasons[nc.Reason]
	switch {
	case isFailing && (!wasFailing || oc.Message != nc.Message):
		out = append(out, eventInfo{typ: corev1.EventTypeWarning, reason: nc.Reason, msg: nc.Message})
	case wasFailing && !isFailing:
		out = append(out, eventInfo{typ: corev1.EventTypeNormal, reason: "Recovered", msg: "git sync works again"})
	}
	return out
}
