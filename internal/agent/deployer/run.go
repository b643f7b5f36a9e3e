package deployer

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/postrenderer"
	ri "helm.sh/helm/v4/pkg/release"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// deployRun is the Helm install or upgrade of one Deploy. Deploy may run
// it a second time, after adopting objects Helm refused (adoption): Helm
// refuses before it writes anything.
type deployRun struct {
	ctx context.Context
	ac  *action.Configuration
	// client is Helm's own kube client; each run wraps it anew.
	client *kube.Client
	mapper meta.RESTMapper
	// deployed are the objects of the release's last manifest this
	// process applied (builds.deployed).
	deployed *releaseObjects

	opts     fleet.BundleDeploymentOptions
	helm     *fleet.HelmOptions
	name, ns string
	// last is the release's latest revision: nil installs.
	last *release.Release

	ch         *chart.Chart
	values     map[string]any
	postRender postrenderer.PostRenderer
	labels     map[string]string
	wait       kube.WaitStrategy
	timeout    time.Duration
}

// once runs the action with a fresh actionClient, which it returns.
func (r *deployRun) once() (ri.Releaser, *actionClient, error) {
	kc := &actionClient{Client: r.client, ctx: r.ctx, builds: builds{parse: r.client.Build, mapper: r.mapper}}
	r.ac.KubeClient = kc
	if r.last == nil {
		rel, err := r.install().RunWithContext(r.ctx, r.ch, r.values)
		return rel, kc, err
	}
	u := r.upgrade()
	if !u.ForceReplace && r.last.ApplyMethod == string(release.ApplyMethodServerSideApply) {
		kc.fastApply, kc.forceConflicts = true, u.ForceConflicts
		kc.deployed = r.deployed
	}
	rel, err := u.RunWithContext(r.ctx, r.name, r.ch, r.values)
	return rel, kc, err
}

func (r *deployRun) install() *action.Install {
	helm := r.helm
	i := action.NewInstall(r.ac)
	i.ReleaseName, i.Namespace = r.name, r.ns
	i.Replace = true
	i.TakeOwnership = helm.TakeOwnership
	i.ForceReplace = helm.Force
	i.ServerSideApply = !helm.TakeOwnership && !helm.Force
	// The agent is the authority on what it deploys: fields someone
	// else changed are taken back instead of failing with a conflict.
	i.ForceConflicts = i.ServerSideApply
	i.RollbackOnFailure = helm.Atomic
	i.WaitStrategy, i.Timeout, i.WaitForJobs = r.wait, r.timeout, helm.WaitForJobs
	i.SkipSchemaValidation = helm.SkipSchemaValidation
	// As in Rancher Fleet, templates may resolve host names
	// (getHostByName) unless the bundle sets helm.disableDNS.
	i.EnableDNS = !helm.DisableDNS
	i.Labels = r.labels
	i.PostRenderer = r.postRender
	return i
}

func (r *deployRun) upgrade() *action.Upgrade {
	helm := r.helm
	u := action.NewUpgrade(r.ac)
	u.Namespace = r.ns
	// An object new to the release that exists without this release's
	// ownership is adopted by Helm only with helm.takeOwnership; the
	// agent adopts, beyond that, namespaced objects of no release and
	// those of this BundleDeployment's earlier release (adoption), never
	// what someone else keeps.
	// Objects the agent itself applied for this release (CRDs created
	// first, an upgrade interrupted before it was recorded) already carry
	// its ownership metadata, which Helm accepts.
	u.TakeOwnership = helm.TakeOwnership
	u.ForceReplace = helm.Force || (r.opts.CorrectDrift != nil && r.opts.CorrectDrift.Force)
	u.ServerSideApply, u.ForceConflicts = "true", true
	if u.ForceReplace {
		u.ServerSideApply, u.ForceConflicts = "false", false
	}
	u.MaxHistory = maxHistory(helm)
	u.RollbackOnFailure = helm.Atomic
	u.WaitStrategy, u.Timeout, u.WaitForJobs = r.wait, r.timeout, helm.WaitForJobs
	u.SkipSchemaValidation = helm.SkipSchemaValidation
	u.EnableDNS = !helm.DisableDNS
	u.Labels = r.labels
	u.PostRenderer = r.postRender
	return u
}

// adoptObjects adopts, as the deploying identity (g), the objects of
// rendered that Helm refused to take into run's release and the agent may
// adopt (adoption); the adopter returned holds those it marked, also when
// it fails partway.
func (d *Deployer) adoptObjects(ctx context.Context, g *restGetter, mapper meta.RESTMapper, bdName string, run *deployRun, rendered []*unstructured.Unstructured) (*adopter, error) {
	cfg, err := g.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	a := &adopter{
		d: d, dyn: dyn, mapper: mapper, bdName: bdName,
		target: releaseID{namespace: run.ns, name: run.name}, upgrade: run.last != nil,
	}
	if run.last != nil {
		if a.known, err = knownObjects(run.last.Manifest); err != nil {
			return nil, fmt.Errorf("reading the objects of release %s: %w", a.target, err)
		}
	}
	_, err = a.adopt(ctx, rendered)
	return a, err
}

// unadoptUnrecorded undoes the marks of a (see adopter.unmark) when the
// failed deploy of run stored no new revision of its release: Helm failed
// before recording it (storage refused, an object that appeared meanwhile),
// so no release lists the objects under the name they were given. A
// revision stored, even failed, lists them and is uninstalled with them.
func (d *Deployer) unadoptUnrecorded(ctx context.Context, run *deployRun, a *adopter) error {
	if a == nil || len(a.marked) == 0 {
		return nil
	}
	// The deploy may have failed because ctx ended: undo all the same.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unmarkTimeout)
	defer cancel()
	last, err := d.lastRelease(run.ac, run.name)
	if err != nil {
		return fmt.Errorf("reading release %s/%s to undo the adoption of %d objects: %w", run.ns, run.name, len(a.marked), err)
	}
	if last != nil && (run.last == nil || last.Version > run.last.Version) {
		return nil
	}
	return a.unmark(ctx)
}

// unmarkTimeout bounds undoing an adoption after a failed deploy.
const unmarkTimeout = 30 * time.Second

// recorded finishes a deploy: it writes what store still holds, remembers
// the objects kc applied, and returns the release.
func (d *Deployer) recorded(store *releaseStore, kc *actionClient, key string, rel ri.Releaser, err error) (*Release, error) {
	if ferr := store.flush(); ferr != nil && err == nil {
		// Helm only logs a failure to record a finished install: the
		// retry finds what was applied and records it.
		err = fmt.Errorf("recording release %s: %w", key, ferr)
	}
	if err != nil {
		// A failed action may have left any manifest deployed.
		d.deployed.forget(key)
		return nil, err
	}
	v1, err := asV1(rel)
	if err != nil {
		return nil, err
	}
	if ro, ok := kc.objectsOf(v1.Manifest); ok {
		d.deployed.put(key, ro)
	} else {
		d.deployed.forget(key)
	}
	return toRelease(v1)
}
