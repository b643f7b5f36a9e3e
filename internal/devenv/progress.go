package devenv

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/statusview"
)

// Progress is how far the quickstart fleet is.
type Progress struct {
	// Clusters are the registered clusters (status.namespace set) by env
	// label.
	Clusters map[string]string
	// CheckedIn counts those whose agent reported since the start.
	CheckedIn int
	// Bundles of the example GitRepo, and how many of their deployments
	// are Ready out of how many exist.
	Bundles, Ready, Deployments int
	// Done is true when both agents have checked in and every example
	// bundle is Ready on both clusters.
	Done bool
	// Problem is the first thing that is not Ready, if any.
	Problem string
	View    statusview.View
}

// expectedDeployments is every example bundle on both clusters.
var expectedDeployments = 2 * len(ExampleBundlePaths)

// Line is a one-line summary. Its "deployments ready" count is of the
// deployments that exist, as in the status view's header below it; how many
// are expected is said apart until they all exist.
func (p Progress) Line() string {
	deployments := fmt.Sprintf("deployments ready %d/%d", p.Ready, p.Deployments)
	if p.Deployments != expectedDeployments {
		deployments += fmt.Sprintf(" (%d expected)", expectedDeployments)
	}
	return fmt.Sprintf("clusters registered %d/2 (agents checked in %d/2) · bundles %d/%d · %s",
		len(p.Clusters), p.CheckedIn, p.Bundles, len(ExampleBundlePaths), deployments)
}

// Blocker is the first thing the quickstart still waits for, in the order
// they happen, with the first problem of the status view when there is one;
// empty when Done.
func (p Progress) Blocker() string {
	var what string
	switch {
	case p.Done:
		return ""
	case len(p.Clusters) < 2:
		what = fmt.Sprintf("clusters registered %d/2", len(p.Clusters))
	case p.CheckedIn < 2:
		what = fmt.Sprintf("agents checked in %d/2 since this run started", p.CheckedIn)
	case p.Bundles < len(ExampleBundlePaths):
		what = fmt.Sprintf("bundles created %d/%d", p.Bundles, len(ExampleBundlePaths))
	case p.Deployments < expectedDeployments:
		what = fmt.Sprintf("deployments created %d/%d", p.Deployments, expectedDeployments)
	default:
		what = fmt.Sprintf("deployments ready %d/%d", p.Ready, p.Deployments)
	}
	if p.Problem != "" {
		what += "; first problem: " + p.Problem
	}
	return what
}

// CheckProgress reads the manager cluster and tells how far the quickstart
// fleet is. An agent counts as checked in when its cluster is neither
// Offline nor waiting for a first check-in, and it last reported at or after
// since (so that a resumed run waits for the restarted agents).
func CheckProgress(ctx context.Context, c client.Reader, since time.Time) (Progress, error) {
	p := Progress{Clusters: map[string]string{}}
	f, err := statusview.Load(ctx, c, Workspace)
	if err != nil {
		return p, err
	}
	for i := range f.Clusters {
		cl := &f.Clusters[i]
		if env := cl.Labels["env"]; env != "" && cl.Status.Namespace != "" {
			p.Clusters[env] = cl.Name
			st := statusview.ClusterState(cl)
			fresh := !cl.Status.Agent.LastSeen.Time.Before(since.Truncate(time.Second))
			if st != string(fleet.Offline) && st != fleet.ClusterWaitCheckIn && fresh {
				p.CheckedIn++
			}
		}
	}
	p.View = statusview.Build(f)
	for _, g := range p.View.Groups {
		if g.Title != "GitRepo "+Workspace+"/"+GitRepoName {
			continue
		}
		p.Bundles = len(g.Rows)
		for _, r := range g.Rows {
			for _, cell := range r.Cells {
				if cell == statusview.NotTargeted {
					continue
				}
				p.Deployments++
				if cell == string(fleet.Ready) {
					p.Ready++
				}
			}
		}
	}
	if len(p.View.Problems) > 0 {
		pr := p.View.Problems[0]
		p.Problem = fmt.Sprintf("%s: %s: %s", pr.Object, pr.State, pr.Message)
	}
	p.Done = len(p.Clusters) == 2 && p.CheckedIn == 2 && p.Bundles == len(ExampleBundlePaths) &&
		p.Deployments == 2*len(ExampleBundlePaths) && p.Ready == p.Deployments
	return p, nil
}

// waitAllReady shows progress until every example bundle is Ready on both
// clusters, a child process dies, the timeout passes or ctx ends. The
// timeout counts from here, after building and starting, so that the first
// run's build of the control plane does not eat into it.
func (e *Env) waitAllReady(ctx context.Context) error {
	e.phase("waiting until every bundle is Ready on both clusters")
	uc, err := e.Client(Upstream)
	if err != nil {
		return err
	}
	var deadline <-chan time.Time
	if e.opts.ReadyTimeout > 0 {
		deadline = time.After(e.opts.ReadyTimeout)
	}
	last, lastProblem := "", ""
	lastPrint := time.Now()
	for {
		if err := e.Failed(); err != nil {
			return err
		}
		p, err := CheckProgress(ctx, uc, e.started)
		switch {
		case err != nil:
			e.logf("    (reading status: %v)", err)
		case e.opts.Live:
			var b bytes.Buffer
			_ = statusview.Render(&b, p.View, statusview.RenderOptions{Now: time.Now(), Color: true})
			fmt.Fprintf(e.opts.Out, "\x1b[H\x1b[2J[%5s] waiting: %s\n\n%s", time.Since(e.started).Round(time.Second), p.Line(), b.String())
		default:
			if line := p.Line(); line != last || (p.Problem != lastProblem && p.Problem != "") || time.Since(lastPrint) > 30*time.Second {
				e.logf("[%5s]   %s", time.Since(e.started).Round(time.Second), line)
				if p.Problem != "" && (p.Problem != lastProblem || time.Since(lastPrint) > 30*time.Second) {
					e.logf("          waiting on %s", truncate(p.Problem, 160))
				}
				last, lastProblem, lastPrint = line, p.Problem, time.Now()
			}
		}
		if err == nil && p.Done {
			e.phase("all bundles Ready on 2 clusters")
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return timeoutError(e.opts.ReadyTimeout, p, err, e.opts.StateDir)
		case <-time.After(2 * time.Second):
		}
	}
}

// timeoutError says what --timeout gave up on: the first thing still
// waited for (readErr when the status could not even be read) and the
// whole progress line.
func timeoutError(timeout time.Duration, p Progress, readErr error, stateDir string) error {
	blocker := p.Blocker()
	if readErr != nil {
		blocker = "reading the status: " + readErr.Error()
	}
	return fmt.Errorf("the fleet was not Ready within --timeout %s of waiting: still waiting on %s. Progress: %s. Logs are in %s/logs",
		timeout, blocker, p.Line(), stateDir)
}

// GuideMode says whether the fleet still runs when the guide is printed.
type GuideMode int

const (
	// GuideRunning: the fleet runs until Ctrl-C.
	GuideRunning GuideMode = iota
	// GuideStopped: --exit-when-ready stopped it once Ready.
	GuideStopped
)

// pushEdit is the suggested change to the example repository. The first
// run's replaces the text the examples ship with; a resumed run's must
// change the file whatever an earlier run's edit left there (else `git
// commit` finds nothing to commit), so it writes the time of day.
func (e *Env) pushEdit() string {
	if e.resumed {
		return `sed -i "s/hello[^\"]*from dev[^\"]*/hello from dev at $(date +%T)/" helm/fleet.yaml`
	}
	return `sed -i 's/hello from dev/hello again from dev/' helm/fleet.yaml`
}

// Guide is what to do next, printed once everything is Ready.
func (e *Env) Guide(mode GuideMode) string {
	if mode == GuideStopped {
		return fmt.Sprintf(`
Every example bundle was Ready on both clusters; --exit-when-ready then stopped the agents,
the manager, the git server and the clusters. The state is kept in %s:
%s.
`, e.opts.StateDir, e.opts.ResumeHint())
	}
	up, dev, prod := e.Kubeconfig(Upstream), e.Kubeconfig(Dev), e.Kubeconfig(Prod)
	var b strings.Builder
	fmt.Fprintf(&b, `
Fleet is running: 1 manager cluster, 2 downstream clusters, every example bundle Ready on both.

Kubeconfigs (admin):
  manager (upstream)  %s
  dev   (env=dev)     %s   registered agent-initiated (token)
  prod  (env=prod)    %s   registered manager-initiated (kubeconfig Secret)

Look around (from the repository root; kubectl is optional, bin/fleet status shows the same):
  bin/fleet status --kubeconfig %s -n %s
  kubectl --kubeconfig %s get gitrepos,bundles,clusters.fleet.cattle.io -A
  kubectl --kubeconfig %s get bundledeployments.fleet.cattle.io -A
  kubectl --kubeconfig %s -n fleet-examples get configmaps,services
  kubectl --kubeconfig %s -n fleet-examples get configmap greeter -o yaml

Push a change and watch it roll out (the GitRepo polls every %s):
  cd %s
  %s
  git commit -am "new dev greeting" && git push
  cd - && bin/fleet status --kubeconfig %s -n %s
  (only the env=dev cluster gets the new greeting; prod keeps its own)

Logs: %s/logs/ and %s/<cluster>/apiserver.log
Ctrl-C stops everything and keeps the state; %s.
`, up, dev, prod,
		up, Workspace, up, up, dev, prod,
		e.opts.PollingInterval, e.WorkingCopy(), e.pushEdit(), up, Workspace,
		e.opts.StateDir, e.opts.StateDir, e.opts.ResumeHint())
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
