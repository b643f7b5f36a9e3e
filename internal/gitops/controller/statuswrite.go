package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/statuswrite"
)

// syncedFields are the status fields the poll and the sync write during a
// reconcile. They are what this reconcile learned from git; everything else
// in the status is derived again on each write, so on a conflict only these
// are carried over to the freshly read GitRepo.
type syncedFields struct {
	// Polled: the ref lookup saw a new commit.
	Polled          bool
	PollingCommit   string
	LastPollingTime *metav1.Time
	// Synced: a commit (or a new spec) was applied.
	Synced             bool
	Commit             string
	ObservedGeneration int64
	UpdateGeneration   int64
}

// syncedBy returns what the poll and sync changed between before and after.
func syncedBy(before, after *fleet.GitRepoStatus) syncedFields {
	return syncedFields{
		Polled: before.PollingCommit != after.PollingCommit ||
			!equality.Semantic.DeepEqual(before.LastPollingTime, after.LastPollingTime),
		PollingCommit:   after.PollingCommit,
		LastPollingTime: after.LastPollingTime,
		Synced: before.Commit != after.Commit ||
			before.ObservedGeneration != after.ObservedGeneration ||
			before.UpdateGeneration != after.UpdateGeneration,
		Commit:             after.Commit,
		ObservedGeneration: after.ObservedGeneration,
		UpdateGeneration:   after.UpdateGeneration,
	}
}

// apply writes the changed fields into st; unchanged ones keep st's values,
// which may be newer than the ones this reconcile started from.
func (f syncedFields) apply(st *fleet.GitRepoStatus) {
	if f.Polled {
		st.PollingCommit, st.LastPollingTime = f.PollingCommit, f.LastPollingTime
	}
	if f.Synced {
		st.Commit, st.ObservedGeneration, st.UpdateGeneration = f.Commit, f.ObservedGeneration, f.UpdateGeneration
	}
}

// then is f overlaid with what newer changed: the fields of a reconcile
// whose status write failed, updated by the retry's own poll and sync.
func (f syncedFields) then(newer syncedFields) syncedFields {
	if newer.Polled {
		f.Polled, f.PollingCommit, f.LastPollingTime = true, newer.PollingCommit, newer.LastPollingTime
	}
	if newer.Synced {
		f.Synced, f.Commit, f.ObservedGeneration, f.UpdateGeneration = true, newer.Commit, newer.ObservedGeneration, newer.UpdateGeneration
	}
	return f
}

// writeStatus derives the status of repo (as read at the start of the
// reconcile) from what the reconcile did and writes it through
// statuswrite.Write, which skips an unchanged status only when the cache
// can be trusted and re-reads the GitRepo on a conflict. Only what the
// reconcile learned (out, done, the Bundles' summary) is carried over to a
// re-read copy; the rest is derived from that copy. Events compare the
// status actually stored with the one written, so each transition
// (Recovered, a new failure) is recorded exactly once however stale the
// cache was.
func (r *Reconciler) writeStatus(ctx context.Context, repo *fleet.GitRepo, out syncOutcome, done syncedFields) error {
	key := client.ObjectKeyFromObject(repo)
	// Conditions describe the spec this outcome was computed for.
	generation := repo.Generation
	bs, err := r.bundleStatus(ctx, repo)
	if err != nil {
		return err
	}
	return statuswrite.Write(ctx, repo, statuswrite.Options[*fleet.GitRepo]{
		Versions: &r.statusRV,
		Compute: func(cur *fleet.GitRepo) {
			done.apply(&cur.Status)
			setWebhookStatus(&cur.Status, webhookMarkOf(cur))
			cur.Status.ConsecutiveFailures = r.Opts.Tracker.Failures(key)
			setBundleStatus(&cur.Status, bs)
			setConditions(&cur.Status, generation, out, bs)
		},
		Equal:   func(a, b *fleet.GitRepo) bool { return equality.Semantic.DeepEqual(a.Status, b.Status) },
		Patch:   statuswrite.PatchStatus[*fleet.GitRepo](r.Client),
		Get:     statuswrite.ReadLive(r.APIReader, func() *fleet.GitRepo { return &fleet.GitRepo{} }),
		Written: r.emitEvents,
	})
}
