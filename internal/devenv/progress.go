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

// Line is a one-line summary.
func (p Progress) Line() string {
	return fmt.Sprintf("clusters registered %d/2 (agents checked in %d/2) · bundles %d/%d · deployments ready %d/%d",
		len(p.Clusters), p.CheckedIn, p.Bundles, len(ExampleBundlePaths), p.Ready, 2*len(ExampleBundlePaths))
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
// clusters, a child process dies, the timeout passes or ctx ends.
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
			msg := fmt.Sprintf("not every bundle became Ready within %s (%s)", e.opts.ReadyTimeout, p.Line())
			if p.Problem != "" {
				msg += "; first problem: " + p.Problem
			}
			return fmt.Errorf("%s; logs are in %s/logs", msg, e.opts.StateDir)
		case <-time.After(2 * time.Second):
		}
	}
}

// Guide is what to do next, printed once everything is Ready.
func (e *Env) Guide() string {
	up, dev, prod := e.Kubeconfig(Upstream), e.Kubeconfig(Dev), e.Kubeconfig(Prod)
	var b strings.Builder
	fmt.Fprintf(&b, `
Fleet is running: 1 manager cluster, 2 downstream clusters, every example bundle Ready on both.

Kubeconfigs (admin):
  manager (upstream)  %s
  dev   (env=dev)     %s   registered agent-initiated (token)
  prod  (env=prod)    %s   registered manager-initiated (kubeconfig Secret)

Look around:
  bin/fleet status --kubeconfig %s -n %s
  kubectl --kubeconfig %s get gitrepos,bundles,clusters.fleet.cattle.io -A
  kubectl --kubeconfig %s get bundledeployments.fleet.cattle.io -A
  kubectl --kubeconfig %s -n fleet-examples get configmaps,services
  kubectl --kubeconfig %s -n fleet-examples get configmap greeter -o yaml

Push a change and watch it roll out (the GitRepo polls every %s):
  cd %s
  sed -i 's/hello from dev/hello again from dev/' helm/fleet.yaml
  git commit -am "new dev greeting" && git push
  bin/fleet status --kubeconfig %s -n %s     # from the repository root
  (only the env=dev cluster gets the new greeting; prod keeps its own)

Logs: %s/logs/ and %s/<cluster>/apiserver.log
Ctrl-C stops everything and keeps the state; `+"`fleet dev up`"+` resumes, `+"`fleet dev down`"+` removes it.
`, up, dev, prod,
		up, Workspace, up, up, dev, prod,
		e.opts.PollingInterval, e.WorkingCopy(), up, Workspace,
		e.opts.StateDir, e.opts.StateDir)
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
