package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetgo/fleet/internal/contentapi"
)

// auditPolicy logs the metadata of every request except the API server's
// own: agents are told apart by their ServiceAccount, the manager by its
// user agent (the harness's own clients use another one).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:apiserver"]
- level: Metadata
`

// managerUserAgent is set on the manager's client config by the harness.
const managerUserAgent = "fleet-controller-scale"

// Requests counts the agents' requests in a time window, from the audit
// log.
type Requests struct {
	WindowSeconds float64 `json:"windowSeconds"`
	// Agents is the number of distinct agent credentials seen.
	Agents int `json:"agents"`
	Total  int `json:"total"`
	// PerAgentPerMinute is Total / clusters / minutes.
	PerAgentPerMinute float64 `json:"perAgentPerMinute"`
	// Heartbeats are patches of clusters/status, or check-ins through the
	// content API (updates of clusterstatuses, which the manager then
	// writes on the Cluster: its writes count in ManagerWrites);
	// OtherWrites are every other create/update/patch/delete.
	Heartbeats  int            `json:"heartbeats"`
	OtherWrites int            `json:"otherWrites"`
	ByVerb      map[string]int `json:"byVerb"`
	// Manager counts the manager's own requests in the same window, and
	// its writes by resource.
	Manager int `json:"manager"`
	// RealAgent counts the requests of the real fleet-agent (not included
	// in Total), per minute.
	RealAgentPerMinute float64        `json:"realAgentPerMinute"`
	RealAgentByVerb    map[string]int `json:"realAgentByVerb,omitempty"`
	ManagerWrites      map[string]int `json:"managerWrites,omitempty"`
	// ManagerWatches counts the watches the manager started in the window,
	// by resource. Its watches last minutes, so one started inside a
	// phase replaces one that ended: mostly one the API server closed
	// because it fell behind (a full buffer), a sign of a saturated server.
	ManagerWatches map[string]int `json:"managerWatches,omitempty"`
}

type auditEvent struct {
	Stage     string                    `json:"stage"`
	Verb      string                    `json:"verb"`
	User      struct{ Username string } `json:"user"`
	UserAgent string                    `json:"userAgent"`
	ObjectRef *struct {
		Resource, Subresource, Namespace string
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// countAgentRequests reads the audit log and counts requests by agent
// credentials received in [from, to). workspace is excluded (its
// ServiceAccount is the registration token's, used before the cluster
// credential exists).
func countAgentRequests(path, workspace, realAgentNS string, from, to time.Time, clusters int) (Requests, error) {
	r := Requests{WindowSeconds: to.Sub(from).Seconds(), ByVerb: map[string]int{}, ManagerWrites: map[string]int{},
		RealAgentByVerb: map[string]int{}, ManagerWatches: map[string]int{}}
	realAgent := 0
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	agents := map[string]bool{}
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.RequestReceived.Before(from) || !ev.RequestReceived.Before(to) {
			continue
		}
		// A watch is logged when it starts and when it ends; count it once.
		if ev.Stage == "ResponseComplete" && ev.Verb == "watch" || ev.Stage == "ResponseStarted" && ev.Verb != "watch" {
			continue
		}
		write := false
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			write = true
		}
		if strings.HasPrefix(ev.UserAgent, managerUserAgent) {
			r.Manager++
			if write && ev.ObjectRef != nil {
				r.ManagerWrites[ev.Verb+" "+strings.TrimSuffix(ev.ObjectRef.Resource+"/"+ev.ObjectRef.Subresource, "/")]++
			}
			if ev.Verb == "watch" && ev.ObjectRef != nil {
				r.ManagerWatches[ev.ObjectRef.Resource]++
			}
			continue
		}
		sa, ok := strings.CutPrefix(ev.User.Username, "system:serviceaccount:")
		if !ok || strings.HasPrefix(sa, workspace+":") {
			continue
		}
		if realAgentNS != "" && strings.HasPrefix(sa, realAgentNS+":") {
			realAgent++
			r.RealAgentByVerb[ev.Verb]++
			continue
		}
		agents[sa] = true
		r.Total++
		r.ByVerb[ev.Verb]++
		if write {
			if ev.ObjectRef != nil && (ev.ObjectRef.Resource == "clusters" && ev.ObjectRef.Subresource == "status" ||
				ev.ObjectRef.Resource == contentapi.ClusterStatusResource) {
				r.Heartbeats++
			} else {
				r.OtherWrites++
			}
		}
	}
	r.Agents = len(agents)
	if r.WindowSeconds > 0 {
		r.RealAgentPerMinute = float64(realAgent) / (r.WindowSeconds / 60)
	}
	if clusters > 0 && r.WindowSeconds > 0 {
		r.PerAgentPerMinute = float64(r.Total) / float64(clusters) / (r.WindowSeconds / 60)
	}
	return r, sc.Err()
}

// apiRequestTotal sums apiserver_request_total from the API server's
// /metrics (every client: manager, agents, harness).
func apiRequestTotal(ctx context.Context, cs kubernetes.Interface) (total, mutating float64, err error) {
	err = eachRequestTotal(ctx, cs, func(line string, v float64) {
		total += v
		for _, verb := range []string{`verb="POST"`, `verb="PUT"`, `verb="PATCH"`, `verb="DELETE"`} {
			if strings.Contains(line, verb) {
				mutating += v
			}
		}
	})
	return total, mutating, err
}

// eachRequestTotal calls f with every apiserver_request_total series of
// the API server's /metrics and its value.
func eachRequestTotal(ctx context.Context, cs kubernetes.Interface, f func(line string, v float64)) error {
	return eachSeries(ctx, cs, "apiserver_request_total", f)
}

// eachSeries calls f with every series of the counter or gauge named
// metric in the API server's /metrics, and its value.
func eachSeries(ctx context.Context, cs kubernetes.Interface, metric string, f func(line string, v float64)) error {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		f(line, v)
	}
	return sc.Err()
}

// metricLabel is the value of label name in one series line of /metrics
// ("" when it has none). A label starts after "{" or ",": "resource" is
// not found inside "subresource".
func metricLabel(line, name string) string {
	for _, sep := range []string{"{", ","} {
		i := strings.Index(line, sep+name+`="`)
		if i < 0 {
			continue
		}
		rest := line[i+len(sep)+len(name)+2:]
		if j := strings.IndexByte(rest, '"'); j >= 0 {
			return rest[:j]
		}
	}
	return ""
}

// closedWatchers counts, by resource, the watchers the API server's watch
// cache has closed because they fell behind (apiserver_terminated_watchers_total):
// their buffer stayed full while an event waited, which also holds up
// every other watcher of that resource for up to 100 ms.
func closedWatchers(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	m := map[string]float64{}
	err := eachSeries(ctx, cs, "apiserver_terminated_watchers_total", func(line string, v float64) {
		res := metricLabel(line, "resource")
		if g := metricLabel(line, "group"); g != "" {
			res += "." + g
		}
		m[res] += v
	})
	return m, err
}

// Etcd is what etcd itself stores.
type Etcd struct {
	BundleDeployments int `json:"bundleDeployments"`
	// BytesPerBundleDeployment is the mean size of a BundleDeployment's
	// value in etcd (sampled over up to 2,000 keys).
	BytesPerBundleDeployment int `json:"bytesPerBundleDeployment"`
	// ValuesSecrets are Secrets of type bundle-deployment values.
	Contents     int   `json:"contents"`
	ContentBytes int64 `json:"contentBytes"`
	Bundles      int   `json:"bundles"`
	DBSizeBytes  int64 `json:"dbSizeBytes"`
	DBInUseBytes int64 `json:"dbInUseBytes"`
	TotalKeys    int64 `json:"totalKeys"`
	// KeysByResource counts keys per resource ("secrets",
	// "fleet.cattle.io/clusters", ...): the objects each cluster costs.
	KeysByResource map[string]int `json:"keysByResource"`
	// MeanBytesByResource is the mean value size per resource (sampled over
	// up to 500 keys each).
	MeanBytesByResource map[string]int `json:"meanBytesByResource"`
}

func measureEtcd(ctx context.Context, endpoint string) (Etcd, error) {
	var e Etcd
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		return e, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	const bdPrefix = "/registry/fleet.cattle.io/bundledeployments/"
	cnt, err := cli.Get(ctx, bdPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return e, err
	}
	e.BundleDeployments = int(cnt.Count)
	sample, err := cli.Get(ctx, bdPrefix, clientv3.WithPrefix(), clientv3.WithLimit(2000))
	if err != nil {
		return e, err
	}
	var sum int
	for _, kv := range sample.Kvs {
		sum += len(kv.Value)
	}
	if len(sample.Kvs) > 0 {
		e.BytesPerBundleDeployment = sum / len(sample.Kvs)
	}
	contents, err := cli.Get(ctx, "/registry/fleet.cattle.io/contents/", clientv3.WithPrefix())
	if err != nil {
		return e, err
	}
	e.Contents = len(contents.Kvs)
	for _, kv := range contents.Kvs {
		e.ContentBytes += int64(len(kv.Value))
	}
	b, err := cli.Get(ctx, "/registry/fleet.cattle.io/bundles/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return e, err
	}
	e.Bundles = int(b.Count)
	all, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return e, err
	}
	e.TotalKeys = all.Count
	keys, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return e, err
	}
	e.KeysByResource = map[string]int{}
	for _, kv := range keys.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), "/registry/"), "/")
		res := parts[0]
		if strings.Contains(res, ".") && len(parts) > 1 {
			res += "/" + parts[1]
		}
		e.KeysByResource[res]++
	}
	e.MeanBytesByResource = map[string]int{}
	for res := range e.KeysByResource {
		sample, err := cli.Get(ctx, "/registry/"+res+"/", clientv3.WithPrefix(), clientv3.WithLimit(500))
		if err != nil {
			return e, err
		}
		sum := 0
		for _, kv := range sample.Kvs {
			sum += len(kv.Value)
		}
		if len(sample.Kvs) > 0 {
			e.MeanBytesByResource[res] = sum / len(sample.Kvs)
		}
	}
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return e, err
	}
	e.DBSizeBytes, e.DBInUseBytes = st.DbSize, st.DbSizeInUse
	return e, nil
}

// requestMix counts apiserver_request_total by "VERB resource[/subresource]",
// with the response code appended when it is not 2xx
// (every client). The harness reads it from the downstream API server,
// which has no audit log, to show what real applies ask of it.
func requestMix(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	mix := map[string]float64{}
	err := eachRequestTotal(ctx, cs, func(line string, v float64) {
		key := metricLabel(line, "verb") + " " + metricLabel(line, "resource")
		if sub := metricLabel(line, "subresource"); sub != "" {
			key += "/" + sub
		}
		if code := metricLabel(line, "code"); code != "" && code[0] != '2' {
			key += " " + code // refused (429) or failed: not work done
		}
		mix[key] += v
	})
	return mix, err
}

// mixDelta is after − before, without the keys that did not change.
func mixDelta(before, after map[string]float64) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		if n := int(v - before[k]); n > 0 {
			d[k] = n
		}
	}
	return d
}
