package bundledeployment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// copyDownstreamResources copies the Secrets/ConfigMaps named in
// downstreamResources from the cluster namespace upstream into the release
// namespace downstream, labelled with the BundleDeployment and the agent's
// namespace (see copyScope). It runs before
// the deploy, which may need them; it deletes nothing: copies of entries
// that left the list go only once the deploy succeeded (pruneCopies), so a
// commit that drops an entry and fails to deploy leaves the running
// release its Secret. A copy whose source changed is overwritten even if
// the deploy then fails, as the source's owner asked for the change.
//
// Downstream it acts as the identity the bundle deploys with
// (deployer.PrepareNamespace): the copies and the namespace (not created
// when createNamespace is false) can do no more than the release could.
// An object of a copy's name that is not a copy made for this
// BundleDeployment (label fleet.cattle.io/bundledeployment=<bd>) by this
// agent (label fleet.cattle.io/agent-namespace, if any) is never
// overwritten: the deploy fails and says so, except a copy made for
// takeOver, the BundleDeployment whose release this deploy takes over
// (gone or being deleted, see takeOver): that copy becomes this one's, so
// the app keeps its Secret or ConfigMap through the move.
func (r *Reconciler) copyDownstreamResources(ctx context.Context, bd *fleet.BundleDeployment, opts fleet.BundleDeploymentOptions, takeOver string) error {
	if len(opts.DownstreamResources) == 0 {
		return nil
	}
	ns := deployer.ReleaseNamespace(opts)
	core, err := r.deployer.PrepareNamespace(ctx, opts)
	if err != nil {
		return fmt.Errorf("downstreamResources: %w", err)
	}
	owner := copyOwner{bd: bd.Name, takeOver: takeOver, agentNS: r.opts.AgentNamespace,
		serviceAccount: opts.ServiceAccount, keepResources: opts.KeepResources}
	for _, dr := range opts.DownstreamResources {
		key := types.NamespacedName{Namespace: bd.Namespace, Name: dr.Name}
		switch kind := strings.ToLower(dr.Kind); kind {
		case "secret":
			src := &corev1.Secret{}
			if err := r.apiReader.Get(ctx, key, src); err != nil {
				return fmt.Errorf("downstreamResources: secret %s: %w", dr.Name, err)
			}
			err = copyObject(ctx, core.Secrets(ns), owner, kind, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: dr.Name, Namespace: ns}, Type: src.Type, Data: src.Data,
			}, func(dst, cur *corev1.Secret) { cur.Type, cur.Data, cur.StringData = dst.Type, dst.Data, nil })
		case "configmap":
			src := &corev1.ConfigMap{}
			if err := r.apiReader.Get(ctx, key, src); err != nil {
				return fmt.Errorf("downstreamResources: configmap %s: %w", dr.Name, err)
			}
			err = copyObject(ctx, core.ConfigMaps(ns), owner, kind, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: dr.Name, Namespace: ns}, Data: src.Data, BinaryData: src.BinaryData,
			}, func(dst, cur *corev1.ConfigMap) { cur.Data, cur.BinaryData = dst.Data, dst.BinaryData })
		default:
			return fmt.Errorf("%w: downstreamResources: unsupported kind %q", deployer.ErrRender, dr.Kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pruneCopies deletes the copies in the release namespace of entries no
// longer in downstreamResources, once opts were deployed for bd: the
// release deployed before may have used them until then. Callers ask
// staleCopiesDue first, so that a bundle without downstreamResources
// costs no lists downstream.
func (r *Reconciler) pruneCopies(ctx context.Context, bd *fleet.BundleDeployment, opts fleet.BundleDeploymentOptions) error {
	want := map[string]bool{}
	for _, dr := range opts.DownstreamResources {
		want[strings.ToLower(dr.Kind)+"/"+dr.Name] = true
	}
	return r.deleteCopies(ctx, bd.Name, deployer.ReleaseNamespace(opts), func(c copied) bool {
		return want[c.kind+"/"+c.meta.Name]
	})
}

// ReasonStaleCopies is the reason of the Deployed condition (True: the
// deploy succeeded and is monitored) while copies of entries that left
// downstreamResources could not be deleted; its message says why. Only
// their deletion is retried (pruneRetry), never the deploy. A restarted
// agent reads the reason back to know it still has to retry.
const ReasonStaleCopies = "StaleCopiesNotDeleted"

// pruneRetry is how soon a failed deletion of stale copies is retried.
const pruneRetry = 15 * time.Second

// setCopiesPruned reports the outcome of deleting stale copies after a
// successful deploy on the Deployed condition, which stays True: the
// release is deployed; only the leftover copies are in question.
func setCopiesPruned(bd *fleet.BundleDeployment, err error) {
	c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
	if c == nil || c.Status != metav1.ConditionTrue {
		return
	}
	switch {
	case err != nil:
		msg := cutMessage("deployed, but copies of downstreamResources no longer listed could not be deleted (retried): "+err.Error(), maxCopiesMessage)
		setCondition(&bd.Status, bd.Generation, fleet.ConditionDeployed, true, ReasonStaleCopies, msg)
	case c.Reason == ReasonStaleCopies:
		setCondition(&bd.Status, bd.Generation, fleet.ConditionDeployed, true, ReasonDeployed, "")
	}
}

// maxCopiesMessage bounds, in bytes, the Deployed condition's message on
// stale copies: the joined errors of many copies must not bloat the
// status.
const maxCopiesMessage = 1024

// cutMessage cuts msg to at most n bytes, on a rune boundary so that
// the message stays valid UTF-8 (a name or error text may hold
// multi-byte characters).
func cutMessage(msg string, n int) string {
	if len(msg) <= n {
		return msg
	}
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n]
}

// pruneStaleCopies deletes the copies of entries that left
// downstreamResources once st, the deploy of bd, succeeded, when they may
// exist (st.staleCopies, or the status of an earlier attempt says they are
// left). A failure leaves the deploy as it is (Deployed and monitored) and
// says why on the Deployed condition (setCopiesPruned); it returns how
// soon to try again (0: done).
func (r *Reconciler) pruneStaleCopies(ctx context.Context, bd *fleet.BundleDeployment, st *appliedState) time.Duration {
	r.mu.Lock()
	due, opts := st.staleCopies, st.options
	r.mu.Unlock()
	if !due && !staleCopiesReported(bd) {
		return 0
	}
	err := r.pruneCopies(ctx, bd, opts)
	setCopiesPruned(bd, err)
	// Still due after a failure also when only the status said so (a
	// restarted agent): a deletion of bd then looks for them (removeCopies).
	r.mu.Lock()
	st.staleCopies = err != nil
	r.mu.Unlock()
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("deployed, but stale copies of downstreamResources could not be deleted; retrying the deletion only", "error", err.Error())
		return jitter(pruneRetry)
	}
	return 0
}

// staleCopiesDue tells, before a successful deploy of opts for bd is
// remembered, whether copies of entries no longer listed may be left:
// from what was applied before (mayHaveStaleCopies), or from an earlier
// deploy whose deletion of them has not succeeded yet.
func (r *Reconciler) staleCopiesDue(key types.NamespacedName, bd *fleet.BundleDeployment, opts fleet.BundleDeploymentOptions) bool {
	r.mu.Lock()
	prev := r.applied[key]
	pending := prev != nil && prev.staleCopies
	r.mu.Unlock()
	return pending || staleCopiesReported(bd) || mayHaveStaleCopies(prev, bd, opts)
}

// staleCopiesReported tells whether the status says a deletion of stale
// copies is still due (setCopiesPruned), so that a restarted agent
// retries it.
func staleCopiesReported(bd *fleet.BundleDeployment) bool {
	c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonStaleCopies
}

// mayHaveStaleCopies tells whether copies of downstreamResources that opts
// no longer lists may exist for bd, so that a deploy of a bundle without
// downstreamResources costs no lists downstream. st is the state this
// process recorded at its last successful deploy of bd (nil after a
// restart, or when the last attempt failed: that attempt may have made
// copies). Without st only a BundleDeployment that never reported a
// deploy, successful or not, is taken to have none.
func mayHaveStaleCopies(st *appliedState, bd *fleet.BundleDeployment, opts fleet.BundleDeploymentOptions) bool {
	switch {
	case len(opts.DownstreamResources) > 0:
		return true
	case st != nil:
		return len(st.options.DownstreamResources) > 0
	default:
		return bd.Status.AppliedDeploymentID != "" ||
			meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed) != nil
	}
}

// deleteCopies deletes the copies of downstreamResources this agent made
// for bdName in namespace ns (those an agent made before copies carried
// their agent's namespace too), but those keep (nil: none) wants.
func (r *Reconciler) deleteCopies(ctx context.Context, bdName, ns string, keep func(copied) bool) error {
	return r.deleteCopiesIn(ctx, bdName, copyScope{namespaces: []string{ns}}, keep)
}

// copyScope is where copies of one BundleDeployment are looked for.
// Several agents may share a downstream cluster, each with its own
// namespace, and BundleDeployments of the same name: a copy is this
// agent's when its label fleet.cattle.io/agent-namespace (the label its
// release storage carries too) names this agent's namespace.
type copyScope struct {
	// everywhere: in all namespaces, the copies labelled with this
	// agent's namespace.
	everywhere bool
	// namespaces: in these, also copies without that label, made before
	// copies carried it: where such an agent put them (the namespaces of
	// this agent's releases), never cluster-wide, where they may be
	// another agent's.
	namespaces []string
}

// deleteCopiesIn deletes the copies of downstreamResources made for bdName
// that scope finds, but those keep (nil: none) wants. They are found with
// the agent's own identity (label-selected lists) and each is deleted as
// the identity that made it (its annotation
// fleet.cattle.io/service-account, resolved as a deploy resolves it).
func (r *Reconciler) deleteCopiesIn(ctx context.Context, bdName string, scope copyScope, keep func(copied) bool) error {
	if len(validation.IsValidLabelValue(bdName)) > 0 {
		return nil // no copy can carry the label
	}
	found, err := r.findCopies(ctx, bdName, scope)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range found {
		if keep != nil && keep(c) {
			continue
		}
		errs = append(errs, r.deleteCopy(ctx, c))
	}
	return errors.Join(errs...)
}

// copied is a copy of downstreamResources found downstream.
type copied struct {
	kind string
	meta metav1.ObjectMeta
}

// copySelector selects the copies made for bdName: by the agent of
// agentNS when set, else by any agent (filtered with agentCopy).
func copySelector(bdName, agentNS string) string {
	sel := fleet.BundleDeploymentLabel + "=" + bdName
	if agentNS != "" {
		sel += "," + deployer.StorageAgentNamespaceLbl + "=" + agentNS
	}
	return sel
}

// agentCopy tells whether a copy with these labels may be the agent of
// agentNS's: it names that agent, or no agent (made before copies named
// theirs; legacy allows those, found where this agent's releases are).
func agentCopy(labels map[string]string, agentNS string, legacy bool) bool {
	v, ok := labels[deployer.StorageAgentNamespaceLbl]
	if !ok {
		return legacy
	}
	return v == agentNS
}

// findCopies lists the copies scope covers, each once.
func (r *Reconciler) findCopies(ctx context.Context, bdName string, scope copyScope) ([]copied, error) {
	agentNS := r.opts.AgentNamespace
	var found []copied
	seen := map[types.UID]bool{}
	add := func(cs []copied, legacy bool) {
		for _, c := range cs {
			if !seen[c.meta.UID] && agentCopy(c.meta.Labels, agentNS, legacy) {
				seen[c.meta.UID] = true
				found = append(found, c)
			}
		}
	}
	if scope.everywhere {
		cs, err := r.listCopies(ctx, metav1.NamespaceAll, copySelector(bdName, agentNS))
		if err != nil {
			return nil, err
		}
		add(cs, false)
	}
	for _, ns := range scope.namespaces {
		cs, err := r.listCopies(ctx, ns, copySelector(bdName, ""))
		if err != nil {
			return nil, err
		}
		add(cs, true)
	}
	return found, nil
}

// listCopies lists the Secrets and ConfigMaps sel selects in ns
// (metav1.NamespaceAll: all namespaces) as the agent.
func (r *Reconciler) listCopies(ctx context.Context, ns, sel string) ([]copied, error) {
	where := ns
	if ns == metav1.NamespaceAll {
		where = "all namespaces"
	}
	core := r.deployer.AgentCore()
	opts := metav1.ListOptions{LabelSelector: sel}
	secrets, err := core.Secrets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing copies of downstreamResources in %s: %w", where, err)
	}
	configMaps, err := core.ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing copies of downstreamResources in %s: %w", where, err)
	}
	found := make([]copied, 0, len(secrets.Items)+len(configMaps.Items))
	for _, s := range secrets.Items {
		found = append(found, copied{kind: "secret", meta: s.ObjectMeta})
	}
	for _, c := range configMaps.Items {
		found = append(found, copied{kind: "configmap", meta: c.ObjectMeta})
	}
	return found, nil
}

// deleteCopy deletes c as the identity that made it; only the object
// listed: one made anew since is not ours to judge.
func (r *Reconciler) deleteCopy(ctx context.Context, c copied) error {
	ns := c.meta.Namespace
	as, err := r.deployer.CoreFor(ctx, c.meta.Annotations[fleet.ServiceAccountAnnotation])
	if err == nil {
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &c.meta.UID}}
		if c.kind == "secret" {
			err = as.Secrets(ns).Delete(ctx, c.meta.Name, opts)
		} else {
			err = as.ConfigMaps(ns).Delete(ctx, c.meta.Name, opts)
		}
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s/%s copied for downstreamResources: %w", c.kind, ns, c.meta.Name, err)
	}
	return nil
}

// objectClient is what copyObject needs of a typed client.
type objectClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// copyOwner is who copyObject copies for: the BundleDeployment bd of the
// agent of namespace agentNS, with the serviceAccount it deploys as and
// its keepResources, and takeOver (empty: none), the BundleDeployment
// whose copies it may adopt.
type copyOwner struct {
	bd, takeOver, agentNS, serviceAccount string
	keepResources                         bool
}

// owns tells whether an object with these labels is a copy o may update:
// made for o.bd or o.takeOver, by o's agent or by one that did not label
// its copies with its namespace.
func (o copyOwner) owns(labels map[string]string) bool {
	bd := labels[fleet.BundleDeploymentLabel]
	return (bd == o.bd || (o.takeOver != "" && bd == o.takeOver)) && agentCopy(labels, o.agentNS, true)
}

// copyObject creates dst, or updates the object of its name (set copies
// dst's content into it) when that is a copy made for o.bd (or o.takeOver,
// then made o.bd's); any other object of that name is left alone and
// reported. Copies carry the serviceAccount the bundle names, so that they
// are deleted as the identity that made them, also by a restarted agent,
// and its keepResources, so that a clean-up that finds no release to tell
// it (see removeCopies) knows whether to keep them.
func copyObject[T metav1.Object](ctx context.Context, c objectClient[T], o copyOwner, kind string, dst T, set func(dst, cur T)) error {
	bdName, serviceAccount := o.bd, o.serviceAccount
	mark := func(obj T) {
		l, a := obj.GetLabels(), obj.GetAnnotations()
		if l == nil {
			l = map[string]string{}
		}
		if a == nil {
			a = map[string]string{}
		}
		l[fleet.BundleDeploymentLabel] = bdName
		l[deployer.StorageAgentNamespaceLbl] = o.agentNS
		a[fleet.ServiceAccountAnnotation] = serviceAccount
		a[fleet.KeepResourcesAnnotation] = fmt.Sprint(o.keepResources)
		obj.SetLabels(l)
		obj.SetAnnotations(a)
	}
	cur, err := c.Get(ctx, dst.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		mark(dst)
		_, err = c.Create(ctx, dst, metav1.CreateOptions{FieldManager: deployer.FieldManager})
	case err == nil && !o.owns(cur.GetLabels()):
		return fmt.Errorf("downstreamResources: %s %s/%s already exists and is not a copy made for this bundle deployment (labels %s=%s, %s=%s); it is left unchanged",
			kind, dst.GetNamespace(), dst.GetName(), fleet.BundleDeploymentLabel, bdName, deployer.StorageAgentNamespaceLbl, o.agentNS)
	case err == nil:
		set(dst, cur)
		mark(cur)
		_, err = c.Update(ctx, cur, metav1.UpdateOptions{FieldManager: deployer.FieldManager})
	}
	if err != nil {
		return fmt.Errorf("downstreamResources: %s %s/%s: %w", kind, dst.GetNamespace(), dst.GetName(), err)
	}
	return nil
}

// removeCopies deletes the copies of downstreamResources of the
// BundleDeployment bdName, which is gone and did not ask for
// keepResources, but those in the namespaces kept (a release there that
// another BundleDeployment takes over, with the copies it may adopt). st
// is what this process last deployed for bdName (nil: unknown), releaseNS
// the namespaces of this agent's releases of bdName. With st the copies
// are where it deployed, if it listed any; without (a restart, a failed
// deploy, garbage collection) one list per kind selected by their labels
// across all namespaces finds this agent's, also after a first install
// that failed and stored no release (the agent's identity may list
// cluster-wide, as it does to find release storage), and copies made
// before copies named their agent are looked for where the releases are
// (see copyScope). keepKnown is false when neither st nor a stored release
// tells keepResources (no release, or one already removed with
// keepResources by an earlier clean-up): then only copies whose own
// annotation says keepResources false are deleted. An st whose deletion
// of stale copies is still due (st.staleCopies: the last deploy dropped
// entries whose copies could not be deleted yet) does not tell where
// copies are, even when it lists none: they are looked for as without st.
func (r *Reconciler) removeCopies(ctx context.Context, bdName string, st *appliedState, releaseNS []string, kept map[string]bool, keepKnown bool) error {
	scope := copyScope{everywhere: true, namespaces: releaseNS}
	if st != nil {
		r.mu.Lock()
		pending := st.staleCopies
		r.mu.Unlock()
		switch {
		case pending:
			// the full scope above
		case len(st.options.DownstreamResources) == 0:
			return nil
		default:
			scope = copyScope{namespaces: []string{deployer.ReleaseNamespace(st.options)}}
		}
	}
	return r.deleteCopiesIn(ctx, bdName, scope, func(c copied) bool {
		return kept[c.meta.Namespace] || (!keepKnown && c.meta.Annotations[fleet.KeepResourcesAnnotation] != "false")
	})
}
