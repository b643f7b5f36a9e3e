package simulator

import (
	"path"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
	"github.com/fleetgo/fleet/internal/manifest"
)

// report is what an agent learned from applying a BundleDeployment.
type report struct {
	release   string
	resources []fleet.BundleDeploymentResource
}

// readyStatus is the status a real agent writes once a deployment is
// installed and every resource is ready and unmodified: the same fields,
// conditions and display, so that the manager's summaries treat it as any
// other cluster.
func readyStatus(bd *fleet.BundleDeployment, r report, now time.Time) fleet.BundleDeploymentStatus {
	st := fleet.BundleDeploymentStatus{Conditions: append([]metav1.Condition(nil), bd.Status.Conditions...)}
	st.AppliedDeploymentID = bd.Spec.DeploymentID
	st.Release = r.release
	st.Ready, st.NonModified = true, true
	gen := bd.Spec.Options.ForceSyncGeneration
	st.SyncGeneration = &gen
	st.Resources = r.resources
	st.ResourceCounts = fleet.ResourceCounts{Ready: len(r.resources), DesiredReady: len(r.resources)}
	for _, c := range []struct{ typ, reason string }{
		{fleet.ConditionInstalled, "Deployed"}, {fleet.ConditionDeployed, "Deployed"},
		{fleet.ConditionMonitored, "Monitored"}, {fleet.ConditionReady, "Ready"},
	} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: c.typ, Status: metav1.ConditionTrue,
			Reason: c.reason, ObservedGeneration: bd.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	st.Display = fleet.BundleDeploymentDisplay{Deployed: "Yes", Monitored: "Yes", State: string(fleet.Ready)}
	return st
}

// resourcesOf is resourcesOf(m, ns), parsing each manifest (named id)
// once while it is in use (objectCache).
func (s *Simulator) resourcesOf(id string, m *manifest.Manifest, ns string) []fleet.BundleDeploymentResource {
	objs, ok := s.objects.get(id)
	if !ok {
		objs = resourcesOf(m, "")
		s.objects.add(id, objs)
	}
	out := make([]fleet.BundleDeploymentResource, len(objs))
	for i, o := range objs {
		if o.Namespace == "" {
			o.Namespace = ns
		}
		out[i] = o
	}
	return out
}

// maxCachedManifests is how many manifests objectCache keeps in each of
// its two generations: far more than the bundles a scale run rolls out at
// once (each agent of a rollout asks for the same few), so a manifest in
// use is parsed once, not once per agent.
const maxCachedManifests = 512

// objectCache maps manifest IDs to their objects, keeping the recently
// used ones: a lookup finds the current generation or the previous one
// (and moves the entry into the current one); when the current generation
// is full it becomes the previous one and the old previous one is
// dropped. So at most 2×maxCachedManifests entries are kept, and those
// dropped are the manifests no agent asked for during a whole generation,
// such as those of rollouts long done.
type objectCache struct {
	mu        sync.Mutex
	cur, prev map[string][]fleet.BundleDeploymentResource
}

func (c *objectCache) get(id string) ([]fleet.BundleDeploymentResource, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if objs, ok := c.cur[id]; ok {
		return objs, true
	}
	objs, ok := c.prev[id]
	if ok {
		c.putLocked(id, objs)
	}
	return objs, ok
}

// add caches objs for id; two agents that missed at once both parse the
// manifest, and either result is kept (they are equal).
func (c *objectCache) add(id string, objs []fleet.BundleDeploymentResource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(id, objs)
}

func (c *objectCache) putLocked(id string, objs []fleet.BundleDeploymentResource) {
	if len(c.cur) >= maxCachedManifests {
		c.prev, c.cur = c.cur, nil
	}
	if c.cur == nil {
		c.cur = make(map[string][]fleet.BundleDeploymentResource, maxCachedManifests)
	}
	c.cur[id] = objs
}

// resourcesOf lists the objects of a raw-manifest bundle without rendering
// it (status-only mode): every YAML document of every manifest file outside
// overlays/ and .chart/, in namespace ns unless it names its own.
func resourcesOf(m *manifest.Manifest, ns string) []fleet.BundleDeploymentResource {
	var out []fleet.BundleDeploymentResource
	for _, r := range m.Resources {
		ext := path.Ext(r.Name)
		if strings.HasPrefix(r.Name, "overlays/") || strings.HasPrefix(r.Name, ".chart/") ||
			(ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		for _, doc := range strings.Split(r.Content, "\n---") {
			var obj struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if yaml.Unmarshal([]byte(doc), &obj) != nil || obj.Kind == "" {
				continue
			}
			if obj.Metadata.Namespace == "" {
				obj.Metadata.Namespace = ns
			}
			out = append(out, fleet.BundleDeploymentResource{Kind: obj.Kind, APIVersion: obj.APIVersion,
				Namespace: obj.Metadata.Namespace, Name: obj.Metadata.Name})
		}
	}
	return out
}

func resourcesOfRelease(rel *deployer.Release) []fleet.BundleDeploymentResource {
	out := make([]fleet.BundleDeploymentResource, 0, len(rel.Objects))
	for _, o := range rel.Objects {
		out = append(out, fleet.BundleDeploymentResource{Kind: o.GetKind(), APIVersion: o.GetAPIVersion(),
			Namespace: o.GetNamespace(), Name: o.GetName(), CreatedAt: o.GetCreationTimestamp()})
	}
	return out
}
