package v1alpha1_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// readyMessage is the JSONPath of Rancher Fleet's Status column.
const readyMessage = `.status.conditions[?(@.type=="Ready")].message`

// rancherColumns are Rancher Fleet's printer columns at HEAD (name and
// JSONPath), by plural. Cluster lost Nodes-Ready and Sample-Node in v0.10.
var rancherColumns = map[string][][2]string{
	"gitrepos": {{"Repo", ".spec.repo"}, {"Commit", ".status.commit"},
		{"BundleDeployments-Ready", ".status.display.readyBundleDeployments"}, {"Status", readyMessage}},
	"helmops": {{"Repo", ".spec.helm.repo"}, {"Chart", ".spec.helm.chart"}, {"Version", ".status.version"},
		{"BundleDeployments-Ready", ".status.display.readyBundleDeployments"}, {"Status", readyMessage}},
	"bundles": {{"BundleDeployments-Ready", ".status.display.readyClusters"}, {"Status", readyMessage}},
	"bundledeployments": {{"Deployed", ".status.display.deployed"}, {"Monitored", ".status.display.monitored"},
		{"Status", readyMessage}},
	"clusters": {{"Bundles-Ready", ".status.display.readyBundles"}, {"Last-Seen", ".status.agent.lastSeen"},
		{"Status", readyMessage}},
	"clustergroups": {{"Clusters-Ready", ".status.display.readyClusters"}, {"Bundles-Ready", ".status.display.readyBundles"},
		{"Status", readyMessage}},
	"clusterregistrations":      {{"Cluster-Name", ".status.clusterName"}, {"Labels", ".spec.clusterLabels"}},
	"clusterregistrationtokens": {{"Secret-Name", ".status.secretName"}},
	"gitreporestrictions": {{"Default-ServiceAccount", ".defaultServiceAccount"},
		{"Allowed-ServiceAccounts", ".allowedServiceAccounts"}},
	"contents":                nil,
	"bundlenamespacemappings": nil,
	"policies":                nil,
	"schedules": {{"Schedule", ".spec.schedule"}, {"Duration", ".spec.duration"}, {"Active", ".status.active"},
		{"NextStart", ".status.nextStartTime"}},
}

// TestPrinterColumnsAreRancherFleets: every installed Fleet CRD has
// Rancher Fleet's printer columns, and `kubectl get` (the API server's
// Table) shows them after NAME; a kind without any shows NAME and AGE.
func TestPrinterColumnsAreRancherFleets(t *testing.T) {
	ctx := context.Background()
	n := ns(t, upstream.Client, "printcolumns")
	for plural, want := range rancherColumns {
		t.Run(plural, func(t *testing.T) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			if err := upstream.Client.Get(ctx, client.ObjectKey{Name: plural + ".fleet.cattle.io"}, crd); err != nil {
				t.Fatal(err)
			}
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
			var got [][2]string
			for _, c := range cols {
				m := c.(map[string]any)
				got = append(got, [2]string{m["name"].(string), m["jsonPath"].(string)})
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("CRD %s printer columns %v, want %v", plural, got, want)
			}

			header := []string{"Name"}
			for _, c := range want {
				header = append(header, c[0])
			}
			if want == nil {
				header = append(header, "Age")
			}
			path := "/apis/fleet.cattle.io/v1alpha1/namespaces/" + n + "/" + plural
			if crd.Object["spec"].(map[string]any)["scope"] == "Cluster" {
				path = "/apis/fleet.cattle.io/v1alpha1/" + plural
			}
			if names := tableColumns(t, getTable(t, path)); !reflect.DeepEqual(names, header) {
				t.Errorf("kubectl get %s shows %v, want %v", plural, names, header)
			}
		})
	}
}

// TestClusterTableWithoutNodeColumns: `kubectl get clusters` shows a
// Cluster's ready bundles, last check-in and Ready message, not its node
// counts, which the status still keeps (objects written before, and agents
// that report them).
func TestClusterTableWithoutNodeColumns(t *testing.T) {
	ctx := context.Background()
	c := upstream.Client
	n := ns(t, c, "printcolumns-cluster")
	cluster := &fleet.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "downstream", Namespace: n}}
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	seen := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cluster.Status.Display = fleet.ClusterDisplay{ReadyBundles: "2/3", ReadyNodes: "1/2", SampleNode: "node-a"}
	cluster.Status.Agent = fleet.AgentStatus{LastSeen: seen, ReadyNodes: 1, NonReadyNodes: 1}
	cluster.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "NotReady",
		Message: "1 bundle not ready", LastTransitionTime: seen}}
	if err := c.Status().Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}

	table := getTable(t, "/apis/fleet.cattle.io/v1alpha1/namespaces/"+n+"/clusters")
	if len(table.Rows) != 1 {
		t.Fatalf("kubectl get clusters: %d rows", len(table.Rows))
	}
	want := []any{"downstream", "2/3", "2026-01-02T03:04:05Z", "1 bundle not ready"}
	if got := table.Rows[0].Cells; !reflect.DeepEqual(got, want) {
		t.Errorf("kubectl get clusters row %v (columns %v), want %v", got, tableColumns(t, table), want)
	}

	back := &fleet.Cluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), back); err != nil {
		t.Fatal(err)
	}
	if d := back.Status.Display; d.ReadyNodes != "1/2" || d.SampleNode != "node-a" || back.Status.Agent.NonReadyNodes != 1 {
		t.Errorf("node status not kept: display %+v, agent %+v", d, back.Status.Agent)
	}
}

// getTable GETs path as kubectl get does: as a meta.k8s.io Table.
func getTable(t *testing.T, path string) *metav1.Table {
	t.Helper()
	body, err := upstream.Clientset.CoreV1().RESTClient().Get().AbsPath(path).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if table.Kind != "Table" {
		t.Fatalf("GET %s returned %s, not a Table", path, table.Kind)
	}
	return table
}

func tableColumns(t *testing.T, table *metav1.Table) []string {
	t.Helper()
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	if len(names) == 0 {
		t.Fatal("table without columns")
	}
	return names
}
