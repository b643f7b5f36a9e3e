package manager

import (
	"context"
	"errors"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	gitops "github.com/fleetgo/fleet/internal/gitops/controller"
	"github.com/fleetgo/fleet/internal/gitops/git"
)

// setupGitOps adds the GitRepo controller and, when WebhookAddr is set, the
// git webhook receiver, unless GitOps is disabled: then neither runs, and
// GitRepos and their finalizers stay as they are, their Bundles neither
// re-rendered nor pruned (as in Rancher Fleet without gitjob). Bundles keep
// being targeted and deployed.
func setupGitOps(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.DisableGitOps {
		ctrl.Log.WithName("gitops").Info("GitOps is disabled: no GitRepo controller and no git webhook receiver; GitRepos are left as they are")
		return nil
	}
	git.SetInsecureSkipHostKeyChecks(opts.InsecureSkipHostKeyChecks)
	if opts.InsecureSkipHostKeyChecks {
		ctrl.Log.WithName("gitops").Info("SSH host key checks are off (--insecure-skip-host-key-checks): any server is trusted as the GitRepos' git server")
	}
	_, err := gitops.Setup(ctx, mgr, gitops.Options{
		SystemNamespace:      opts.SystemNamespace,
		WebhookAddr:          opts.WebhookAddr,
		WebhookAllowUnsigned: opts.WebhookAllowUnsigned,
		CheckoutLimits:       opts.GitLimits,
		Policies:             opts.policies,
	})
	return err
}

// clientOptions configures the manager's client. With GitOps off, reads of
// GitRepos (the Bundle controller looks up a GitRepo's URL for a
// GitRepoRestriction's allowedRepoPatterns) go to the API server: through
// the cache, the first of them would start a GitRepo informer, a watch on
// every GitRepo that nothing else needs.
func clientOptions(opts Options) client.Options {
	if !opts.DisableGitOps {
		return client.Options{}
	}
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&fleet.GitRepo{}}}}
}

// errGitOpsOff is what a manager without GitOps answers for GitRepo reads
// of its cache.
var errGitOpsOff = errors.New("GitOps is disabled: GitRepos are not cached")

// withoutGitRepos is a cache reader that refuses GitRepos instead of
// starting an informer for them. The metrics collector lists GitRepos from
// the cache; with GitOps off it reports no GitRepo families (nothing
// processes GitRepos, as in Rancher Fleet, where gitjob reports them).
type withoutGitRepos struct{ client.Reader }

func (r withoutGitRepos) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*fleet.GitRepo); ok {
		return errGitOpsOff
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r withoutGitRepos) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*fleet.GitRepoList); ok {
		return errGitOpsOff
	}
	return r.Reader.List(ctx, list, opts...)
}
