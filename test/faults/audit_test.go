package faults

import (
	"bufio"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// auditLog is the manager API server's audit log (set by TestMain).
var auditLog string

// auditPolicy records, once each, the lists and watches of
// BundleDeployments made by ServiceAccounts (the agents' credentials),
// and nothing else, so that it costs the API server almost nothing.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
  verbs: ["list", "watch"]
  resources:
  - group: fleet.cattle.io
    resources: ["bundledeployments"]
- level: None
`

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// auditEvents returns the audited requests received at or after since,
// in the order they were received.
func auditEvents(t *testing.T, since time.Time) []auditEvent {
	t.Helper()
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []auditEvent
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if seen[ev.AuditID] || ev.RequestReceivedTimestamp.Time.Before(since) {
			continue
		}
		seen[ev.AuditID] = true
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].RequestReceivedTimestamp.Time.Before(out[j].RequestReceivedTimestamp.Time)
	})
	return out
}

// byAgent groups audited requests by the ServiceAccount that made them,
// keeping only the agents of cluster namespaces in clusterNS.
func byAgent(events []auditEvent, clusterNS map[string]bool) map[string][]auditEvent {
	out := map[string][]auditEvent{}
	for _, ev := range events {
		// system:serviceaccount:<namespace>:<name>
		parts := strings.Split(ev.User.Username, ":")
		if len(parts) != 4 || !clusterNS[parts[2]] {
			continue
		}
		out[ev.User.Username] = append(out[ev.User.Username], ev)
	}
	return out
}
