package contentapi

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// The content API also takes the agents' check-ins. A Cluster lives in its
// workspace namespace, so an agent that patches its status itself needs a
// Role and a RoleBinding there, one per cluster; and the API server
// authorizes every request in that namespace by walking all of them. At
// 10,000 clusters that walk was a quarter of the API server's CPU while
// agents registered. An agent that reports through the content API instead
// asks for nothing in the workspace: it PUTs its report in its own cluster
// namespace, where its Role allows `update clusterstatuses`,
//
//	PUT /apis/content.fleet.cattle.io/v1alpha1/namespaces/<cluster namespace>/clusterstatuses/<cluster>
//
// and the manager writes the same status fields on the Cluster, after
// checking that the namespace is that Cluster's and the caller one of its
// ServiceAccounts.
const (
	ClusterStatusResource = "clusterstatuses"
	ClusterStatusKind     = "ClusterStatus"
)

// ClusterStatusAnnotation on a ClusterRegistration tells the manager that
// the agent reports its check-ins through the content API
// (ClusterStatusContentAPI), so the cluster's credential needs no grant in
// the workspace namespace. An agent sets it only after discovery listed
// ClusterStatusResource; other agents (Rancher Fleet's, or ours against an
// older manager) get the grant and patch the Cluster as before.
const (
	ClusterStatusAnnotation = "fleet.cattle.io/cluster-status"
	ClusterStatusContentAPI = "content-api"
)

// ClusterStatusGroupResource identifies the check-in resource in errors.
var ClusterStatusGroupResource = schema.GroupResource{Group: Group, Resource: ClusterStatusResource}

// ClusterStatus is one check-in: the object's name is the Cluster's, its
// namespace the cluster namespace; Workspace is the Cluster's namespace.
type ClusterStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Workspace         string      `json:"workspace"`
	Status            AgentReport `json:"status"`
}

// NewClusterStatus is the check-in report of Cluster workspace/name, whose
// cluster namespace is clusterNS.
func NewClusterStatus(workspace, clusterNS, name string, report AgentReport) *ClusterStatus {
	return &ClusterStatus{
		TypeMeta:   metav1.TypeMeta{Kind: ClusterStatusKind, APIVersion: Group + "/" + Version},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: clusterNS},
		Workspace:  workspace,
		Status:     report,
	}
}

// AgentReport is the part of a Cluster's status its agent owns:
// status.agent and status.display.readyNodes/sampleNode.
type AgentReport struct {
	Agent   fleet.AgentStatus `json:"agent"`
	Display AgentDisplay      `json:"display"`
}

// AgentDisplay is the agent's part of status.display.
type AgentDisplay struct {
	ReadyNodes string `json:"readyNodes"`
	SampleNode string `json:"sampleNode"`
}

// MergePatch is the merge patch of a Cluster's status that writes r. Every
// field is spelled out, zero or empty included: the status types omit
// empty fields, and a patch that omitted them would leave the previous
// check-in's values (a node count that fell to zero, a node list that
// emptied) in place. The same goes for checkinInterval: a report without
// it (an older agent's, through the content API) removes it, so that the
// manager goes back to its own interval for that cluster.
func (r AgentReport) MergePatch() ([]byte, error) {
	a := r.Agent
	return json.Marshal(map[string]any{"status": map[string]any{
		"agent": map[string]any{
			"lastSeen":          a.LastSeen.UTC().Format(time.RFC3339),
			"namespace":         a.Namespace,
			"readyNodes":        a.ReadyNodes,
			"nonReadyNodes":     a.NonReadyNodes,
			"readyNodeNames":    a.ReadyNodeNames,
			"nonReadyNodeNames": a.NonReadyNodeNames,
			"checkinInterval":   a.CheckinInterval,
		},
		"display": map[string]any{
			"readyNodes": r.Display.ReadyNodes,
			"sampleNode": r.Display.SampleNode,
		},
	}})
}

// Apply writes r into a Cluster's status, as MergePatch does.
func (r AgentReport) Apply(st *fleet.ClusterStatus) {
	st.Agent = r.Agent
	st.Agent.LastSeen = metav1.NewTime(r.Agent.LastSeen.UTC().Truncate(time.Second))
	st.Display.ReadyNodes, st.Display.SampleNode = r.Display.ReadyNodes, r.Display.SampleNode
}

// ClusterStatusPath is the URL path of the check-in of cluster name, whose
// cluster namespace is namespace.
func ClusterStatusPath(namespace, name string) string {
	return "/apis/" + Group + "/" + Version + "/namespaces/" + namespace + "/" + ClusterStatusResource + "/" + name
}
