package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
)

// The webhook receiver marks a GitRepo with these annotations instead of
// writing its status: the status then has one writer, the reconciler, which
// can patch it with an optimistic lock (so a transition event is recorded
// once) without racing the receiver. The reconciler copies the mark into the
// Fleet status fields webhookCommit and lastWebhookTime.
const (
	// WebhookCommitAnnotation is the commit of the last verified push.
	WebhookCommitAnnotation = "fleet.cattle.io/webhook-commit"
	// WebhookTimeAnnotation is when it was received (RFC 3339 with
	// nanoseconds, so two pushes in one second are told apart).
	WebhookTimeAnnotation = "fleet.cattle.io/webhook-time"
)

// webhookMark is the push a GitRepo's annotations record.
type webhookMark struct {
	Commit string
	Time   string
}

func webhookMarkOf(o metav1.Object) webhookMark {
	a := o.GetAnnotations()
	return webhookMark{Commit: a[WebhookCommitAnnotation], Time: a[WebhookTimeAnnotation]}
}

func (m webhookMark) empty() bool { return m.Time == "" && m.Commit == "" }

// setWebhookStatus mirrors the mark into the status fields Fleet users read.
// A mark with an unreadable time keeps the commit and leaves the time as is.
func setWebhookStatus(st *fleet.GitRepoStatus, m webhookMark) {
	if m.empty() {
		return
	}
	st.WebhookCommit = m.Commit
	if t, err := time.Parse(time.RFC3339Nano, m.Time); err == nil {
		mt := metav1.NewTime(t.Truncate(time.Second))
		st.LastWebhookTime = &mt
	}
}

// TriggerWebhook marks the GitRepo with a verified push and asks for an
// immediate sync.
func (r *Reconciler) TriggerWebhook(ctx context.Context, repo *fleet.GitRepo, push *payload.Push) error {
	base := repo.DeepCopy()
	ann := repo.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[WebhookCommitAnnotation] = push.Commit
	ann[WebhookTimeAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
	repo.SetAnnotations(ann)
	if err := r.Client.Patch(ctx, repo, client.MergeFrom(base)); err != nil {
		return err
	}
	r.Opts.Tracker.Trigger(client.ObjectKeyFromObject(repo))
	select {
	case r.triggers <- event.TypedGenericEvent[*fleet.GitRepo]{Object: repo}:
	default: // the annotation change reaches the controller through the watch
	}
	return nil
}

// webhookPending says whether the GitRepo carries a push mark this process
// has not polled for yet, and records it as handled. A push that arrives
// while a poll runs changes the mark again, so it is not lost.
func (r *Reconciler) webhookPending(repo *fleet.GitRepo) bool {
	m := webhookMarkOf(repo)
	if m.empty() {
		return false
	}
	key := client.ObjectKeyFromObject(repo)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.webhooks[key] == m {
		return false
	}
	r.webhooks[key] = m
	return true
}
