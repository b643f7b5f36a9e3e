package harness

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetgo/fleet/internal/memlimit"
)

// Timing summarises how long each of a set of objects took.
type Timing struct {
	Count        int     `json:"count"`
	Want         int     `json:"want"`
	P50Seconds   float64 `json:"p50Seconds"`
	P99Seconds   float64 `json:"p99Seconds"`
	TotalSeconds float64 `json:"totalSeconds"`
	// Complete is false when the phase timed out before Count reached Want.
	Complete bool `json:"complete"`
}

func timingOf(d []time.Duration, want int, complete bool) Timing {
	t := Timing{Count: len(d), Want: want, Complete: complete}
	if len(d) == 0 {
		return t
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	pct := func(p float64) float64 {
		i := int(p*float64(len(d))+0.5) - 1
		return d[max(0, min(i, len(d)-1))].Seconds()
	}
	t.P50Seconds, t.P99Seconds, t.TotalSeconds = pct(0.50), pct(0.99), d[len(d)-1].Seconds()
	return t
}

// Process is CPU and memory of a child process.
type Process struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	PeakRSSMiB float64 `json:"peakRSSMiB"`
	RSSMiB     float64 `json:"rssMiB"`
	BaseRSSMiB float64 `json:"baseRSSMiB"`
	// RestRSSMiB is the RSS after RestSeconds without work (Options.Rest);
	// PerClusterKiB is computed from it when it was measured, else from
	// RSSMiB.
	RestRSSMiB    float64 `json:"restRSSMiB,omitempty"`
	RestSeconds   float64 `json:"restSeconds,omitempty"`
	PerClusterKiB float64 `json:"perClusterKiB,omitempty"`
	// AnonMiB and BaseAnonMiB are the anonymous part of the same RSS
	// (RssAnon) and of the base, PerClusterAnonKiB the per-cluster figure
	// from them: without the executable's pages, which the agents touch
	// as they first run Helm's code, the same for one agent or thousands.
	AnonMiB           float64 `json:"anonMiB,omitempty"`
	BaseAnonMiB       float64 `json:"baseAnonMiB,omitempty"`
	PerClusterAnonKiB float64 `json:"perClusterAnonKiB,omitempty"`
}

// Result is everything one scenario run measured.
type Result struct {
	Scenario          Scenario `json:"scenario"`
	Machine           Machine  `json:"machine"`
	BundleDeployments int      `json:"bundleDeployments"`
	// Registration: agents process start -> each Cluster checked in.
	Registration Timing `json:"registration"`
	// Create: bundles created -> each BundleDeployment Ready.
	Create Timing `json:"create"`
	// Change: first bundle changed -> each of its BundleDeployments Ready
	// with the new deploymentID.
	Change Timing `json:"change"`
	// CreateWritten and ChangeWritten: the same start -> each
	// BundleDeployment written by the manager (the manager's share).
	CreateWritten Timing `json:"createWritten"`
	ChangeWritten Timing `json:"changeWritten"`
	// SettleSeconds is how long the harness waited after the creation for
	// every Cluster and Bundle summary to count it Ready, before the
	// change (which is timed from that steady state).
	SettleSeconds float64 `json:"settleSeconds,omitempty"`
	// RegistrationRequests are the agents' and the manager's requests
	// from the start of the agents until a moment after the last first
	// check-in (so the writes a check-in brings about are counted too).
	RegistrationRequests *Requests `json:"registrationRequests,omitempty"`
	// CreateRequests and ChangeRequests are the agents' (and the
	// manager's) requests during the creation and the change rollout.
	CreateRequests *Requests `json:"createRequests,omitempty"`
	ChangeRequests *Requests `json:"changeRequests,omitempty"`
	// Schedule is what the schedule scenario measured: a window's close
	// and opening over every cluster.
	Schedule *ScheduleResult `json:"schedule,omitempty"`
	Floor    *Floor          `json:"floor,omitempty"`
	// RatioToFloor is the rollout total (change, else create) over the
	// floor round trip.
	RatioToFloor float64 `json:"ratioToFloor,omitempty"`
	// FloorCR is the same round trip with a custom resource of a
	// BundleDeployment's size, and RatioToFloorCR the rollout over it.
	FloorCR        *Floor  `json:"floorCustomResource,omitempty"`
	RatioToFloorCR float64 `json:"ratioToFloorCustomResource,omitempty"`
	// Manager CPU is split by phase.
	Manager Process `json:"manager"`
	// ManagerMemoryLimitMiB is the container limit the manager ran as if
	// under (0: none; see Options.ManagerMemoryLimit).
	ManagerMemoryLimitMiB float64            `json:"managerMemoryLimitMiB,omitempty"`
	ManagerCPUByPhase     map[string]float64 `json:"managerCPUByPhase"`
	// CPUByPhase is the CPU seconds of every process on the machine per
	// phase (manager, agents, apiserver, etcd, harness, and with real
	// apply the downstream API server and its etcd): on a shared box
	// it says which of them the phase waited for.
	CPUByPhase map[string]map[string]float64 `json:"cpuByPhase,omitempty"`
	// DownstreamRequestsByPhase counts the downstream API server's requests
	// per phase by "VERB resource" (real apply and the real agent only).
	DownstreamRequestsByPhase map[string]map[string]int `json:"downstreamRequestsByPhase,omitempty"`
	// WatchersClosedByPhase counts, per phase and resource, the watchers the
	// upstream API server closed because they fell behind
	// (apiserver_terminated_watchers_total): the cause of most restarted
	// watches, and a sign of a saturated server.
	WatchersClosedByPhase map[string]map[string]int `json:"watchersClosedByPhase,omitempty"`
	Agents                Process                   `json:"agents"`
	RealAgent             *Process                  `json:"realAgent,omitempty"`
	Idle                  *Requests                 `json:"idle,omitempty"`
	IdleAPIRequestsAll    float64                   `json:"idleAPIRequestsAllClients,omitempty"`
	IdleMutatingAllPerM   float64                   `json:"idleMutatingPerMinuteAllClients,omitempty"`
	Etcd                  *Etcd                     `json:"etcd,omitempty"`
	Profiles              []string                  `json:"profiles,omitempty"`
	// Problems lists what could not be measured, and why.
	Problems []string `json:"problems,omitempty"`
	OutDir   string   `json:"outDir"`
}

func (r *Result) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// PrintTable writes the human summary.
func (r *Result) PrintTable(w io.Writer) {
	s := r.Scenario
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		_, _ = fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...))
	}
	row("scenario", "%s (%s)", s.Name, s.About)
	row("machine", "%d CPUs %s, %.1f GiB, kernel %s, %s", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryGiB, r.Machine.Kernel, r.Machine.Go)
	row("clusters x bundles x resources", "%d x %d x %d (%s), %d BundleDeployments", s.Clusters, s.Bundles, s.ResourcesPerBundle, s.Mode, r.BundleDeployments)
	timing := func(name string, t Timing) {
		if t.Want == 0 {
			return
		}
		done := ""
		if !t.Complete {
			done = fmt.Sprintf("  INCOMPLETE: %d of %d", t.Count, t.Want)
		}
		row(name, "p50 %.2fs  p99 %.2fs  total %.2fs%s", t.P50Seconds, t.P99Seconds, t.TotalSeconds, done)
	}
	timing("registration (N agents)", r.Registration)
	timing("bundles created -> all BDs written", r.CreateWritten)
	timing("bundles created -> all Ready", r.Create)
	if r.SettleSeconds > 0 {
		row("creation rolled up (before change)", "after %.1fs more", r.SettleSeconds)
	}
	timing("bundle change -> all BDs written", r.ChangeWritten)
	timing("bundle change -> all Ready", r.Change)
	if sc := r.Schedule; sc != nil {
		row("Schedule created -> clusters flagged", "%.1fs (window open: no BundleDeployment changes)", sc.FlaggedSeconds)
		timing("window close -> all BDs held", sc.Hold)
		if sc.HoldRequests != nil {
			row("manager BD writes, hold", "%d for %d BundleDeployments", sc.HoldBundleDeploymentWrites, sc.Hold.Want)
		}
		timing("change while closed -> all BDs written", sc.HeldChange)
		if sc.HeldChange.Complete {
			row("held change rolled up", "after %.1fs more; %d applied while held", sc.HeldSettleSeconds, sc.AppliedWhileHeld)
		}
		timing("window open -> all BDs released", sc.ReleaseWritten)
		timing("window open -> all Ready", sc.Release)
		if sc.ReleaseRequests != nil {
			row("manager BD writes, release", "%d for %d BundleDeployments", sc.ReleaseBundleDeploymentWrites, sc.Release.Want)
		}
	}
	if r.Floor != nil {
		row("raw floor (same API server)", "%d ConfigMaps to %d watchers: delivered %.2fs, round trip %.2fs",
			r.Floor.N*max(1, r.Floor.PerWatcher), r.Floor.N, r.Floor.DeliveredSeconds, r.Floor.RoundTripSeconds)
		if len(r.Floor.Rounds) > 1 {
			row("", "median of %d round trips %s", len(r.Floor.Rounds), seconds(r.Floor.Rounds))
		}
	}
	if r.RatioToFloor > 0 {
		row("rollout / floor round trip", "%.2fx", r.RatioToFloor)
	}
	if r.FloorCR != nil {
		row("raw floor, custom resource", "%d objects of %d B to %d watchers: delivered %.2fs, round trip %.2fs",
			r.FloorCR.N*max(1, r.FloorCR.PerWatcher), r.FloorCR.ObjectBytes, r.FloorCR.N, r.FloorCR.DeliveredSeconds, r.FloorCR.RoundTripSeconds)
		if len(r.FloorCR.Rounds) > 1 {
			row("", "median of %d round trips %s", len(r.FloorCR.Rounds), seconds(r.FloorCR.Rounds))
		}
	}
	if r.RatioToFloorCR > 0 {
		row("rollout / custom-resource floor", "%.2fx", r.RatioToFloorCR)
	}
	type phaseRequests struct {
		name string
		r    *Requests
	}
	reqs := []phaseRequests{{"registration", r.RegistrationRequests}, {"create", r.CreateRequests}, {"change", r.ChangeRequests}}
	if r.Schedule != nil {
		reqs = append(reqs, phaseRequests{"hold", r.Schedule.HoldRequests}, phaseRequests{"release", r.Schedule.ReleaseRequests})
	}
	for _, p := range reqs {
		if p.r == nil {
			continue
		}
		row("requests during "+p.name, "agents %d (%.2f per agent, by verb %v); manager %d, writes %v", p.r.Total,
			float64(p.r.Total)/float64(max(1, s.Clusters)), p.r.ByVerb, p.r.Manager, p.r.ManagerWrites)
		if len(p.r.ManagerWatches) > 0 {
			row("manager watches restarted", "%v (during %s)", p.r.ManagerWatches, p.name)
		}
	}
	var phases []string
	for k, v := range r.ManagerCPUByPhase {
		phases = append(phases, fmt.Sprintf("%s %.1fs", k, v))
	}
	sort.Strings(phases)
	row("manager CPU", "%.1fs total (%s)", r.Manager.CPUSeconds, strings.Join(phases, ", "))
	for _, ph := range []string{"register", "create", "change", "hold", "release"} {
		m := r.CPUByPhase[ph]
		if m == nil {
			continue
		}
		total := 0.0
		for _, v := range m {
			total += v
		}
		down := ""
		if v, ok := m["downstream"]; ok {
			down = fmt.Sprintf(", downstream API server and etcd %.1fs", v)
		}
		row("CPU during "+ph, "%.1fs: API server %.1fs, etcd %.1fs, manager %.1fs, agents %.1fs, harness %.1fs%s",
			total, m["apiserver"], m["etcd"], m["manager"], m["agents"], m["harness"], down)
		if mix := r.DownstreamRequestsByPhase[ph]; len(mix) > 0 {
			row("downstream requests, "+ph, "%v", mix)
		}
	}
	closedIn := make([]string, 0, len(r.WatchersClosedByPhase))
	for ph := range r.WatchersClosedByPhase {
		closedIn = append(closedIn, ph)
	}
	sort.Strings(closedIn)
	for _, ph := range closedIn {
		row("watchers closed, fell behind", "%v (during %s)", r.WatchersClosedByPhase[ph], ph)
	}
	row("manager RSS", "peak %.0f MiB, end %.0f MiB", r.Manager.PeakRSSMiB, r.Manager.RSSMiB)
	if r.ManagerMemoryLimitMiB > 0 {
		row("manager memory limit", "%.0f MiB container limit (Go soft limit %.0f MiB)", r.ManagerMemoryLimitMiB, r.ManagerMemoryLimitMiB*memlimit.Ratio)
	}
	rest := ""
	if r.Agents.RestSeconds > 0 {
		rest = fmt.Sprintf(", %.0f MiB after %.0fs at rest", r.Agents.RestRSSMiB, r.Agents.RestSeconds)
	}
	row("agents process RSS", "peak %.0f MiB, end %.0f MiB%s, base %.0f MiB -> %.0f KiB per simulated cluster",
		r.Agents.PeakRSSMiB, r.Agents.RSSMiB, rest, r.Agents.BaseRSSMiB, r.Agents.PerClusterKiB)
	if r.Agents.AnonMiB > 0 {
		row("agents process, anonymous", "%.0f MiB (base %.0f MiB) -> %.0f KiB per simulated cluster",
			r.Agents.AnonMiB, r.Agents.BaseAnonMiB, r.Agents.PerClusterAnonKiB)
	}
	if r.RealAgent != nil {
		row("one real fleet-agent", "RSS %.0f MiB at the end (peak %.0f MiB), CPU %.1fs", r.RealAgent.RSSMiB, r.RealAgent.PeakRSSMiB, r.RealAgent.CPUSeconds)
	}
	if r.Idle != nil {
		row("idle API requests", "%.3f per agent per minute over %.0fs (%d requests, %d heartbeats, %d other writes, by verb %v)",
			r.Idle.PerAgentPerMinute, r.Idle.WindowSeconds, r.Idle.Total, r.Idle.Heartbeats, r.Idle.OtherWrites, r.Idle.ByVerb)
		if r.RealAgent != nil {
			row("idle real fleet-agent requests", "%.2f per minute (by verb %v)", r.Idle.RealAgentPerMinute, r.Idle.RealAgentByVerb)
		}
		row("idle manager requests", "%d in the window, writes %v", r.Idle.Manager, r.Idle.ManagerWrites)
		row("idle API requests, all clients", "%.0f per minute (%.0f mutating per minute)", r.IdleAPIRequestsAll, r.IdleMutatingAllPerM)
	}
	if r.Etcd != nil {
		row("etcd", "%d B per BundleDeployment (%d BDs); %d Contents for %d Bundles (%d B); db %d MiB (%d MiB in use), %d keys",
			r.Etcd.BytesPerBundleDeployment, r.Etcd.BundleDeployments, r.Etcd.Contents, r.Etcd.Bundles, r.Etcd.ContentBytes,
			r.Etcd.DBSizeBytes>>20, r.Etcd.DBInUseBytes>>20, r.Etcd.TotalKeys)
	}
	if r.Etcd != nil && len(r.Etcd.KeysByResource) > 0 {
		var ks []string
		for k, v := range r.Etcd.KeysByResource {
			ks = append(ks, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(ks)
		row("etcd keys by resource", "%s", strings.Join(ks, " "))
	}
	for _, p := range r.Profiles {
		row("profile", "%s", p)
	}
	for _, p := range r.Problems {
		row("PROBLEM", "%s", p)
	}
	_ = tw.Flush()
}

// seconds formats durations as "2.41s, 3.02s, 2.87s".
func seconds(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2fs", x)
	}
	return strings.Join(parts, ", ")
}
