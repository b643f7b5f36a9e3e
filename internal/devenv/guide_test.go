package devenv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGuideWhenExitingSaysItStopped: with --exit-when-ready everything is
// stopped right after the guide, so the guide must say so, keep no "Fleet
// is running"/"Ctrl-C stops" promise and name how to resume with a command
// that exists (bin/fleet, not a `fleet` on PATH).
func TestGuideWhenExitingSaysItStopped(t *testing.T) {
	e := &Env{opts: Options{RepoRoot: "/x", StateDir: "/x/.fleet-dev", PollingInterval: 5 * time.Second}}
	stopped := e.Guide(GuideStopped)
	for _, want := range []string{"stopped the agents", "state is kept in /x/.fleet-dev", "`bin/fleet dev up`", "`bin/fleet dev down`"} {
		if !strings.Contains(stopped, want) {
			t.Errorf("stopped guide lacks %q:\n%s", want, stopped)
		}
	}
	for _, bad := range []string{"is running", "Ctrl-C", "kubectl"} {
		if strings.Contains(stopped, bad) {
			t.Errorf("stopped guide says %q although nothing runs:\n%s", bad, stopped)
		}
	}
	running := e.Guide(GuideRunning)
	for _, want := range []string{"Fleet is running", "Ctrl-C stops everything", "`bin/fleet dev up`", "kubectl is optional"} {
		if !strings.Contains(running, want) {
			t.Errorf("running guide lacks %q:\n%s", want, running)
		}
	}
	if strings.Contains(strings.ReplaceAll(running, "bin/fleet dev", ""), "fleet dev up") {
		t.Errorf("running guide names `fleet dev up` without bin/:\n%s", running)
	}
}

// TestGuideEditWorksOnResume runs the push step's edit the guide prints, in
// a shell, on the example fleet.yaml: the first run's edit changes it; on a
// resume the suggested edit must change it again even after the first
// edit (or an earlier resume's) was committed, else `git commit -am` finds
// nothing to commit.
func TestGuideEditWorksOnResume(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "helm", "fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fy := filepath.Join(dir, "helm", "fleet.yaml")
	if err := os.MkdirAll(filepath.Dir(fy), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fy, src, 0o644); err != nil {
		t.Fatal(err)
	}
	edit := func(e *Env) string {
		t.Helper()
		line := ""
		for _, l := range strings.Split(e.Guide(GuideRunning), "\n") {
			if strings.Contains(l, "helm/fleet.yaml") {
				line = strings.TrimSpace(l)
			}
		}
		if line == "" {
			t.Fatalf("guide has no edit of helm/fleet.yaml:\n%s", e.Guide(GuideRunning))
		}
		before, _ := os.ReadFile(fy)
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", line, err, out)
		}
		after, _ := os.ReadFile(fy)
		if bytes.Equal(before, after) {
			t.Fatalf("the guide's edit %q changed nothing in:\n%s", line, before)
		}
		return string(after)
	}
	first := &Env{opts: Options{StateDir: "/s"}}
	if got := edit(first); !strings.Contains(got, `greeting: "hello again from dev"`) {
		t.Errorf("first edit gave:\n%s", got)
	}
	resumed := &Env{opts: Options{StateDir: "/s"}, resumed: true}
	got := edit(resumed)
	if !strings.Contains(got, `greeting: "hello from dev at `) || !strings.Contains(got, `greeting: "hello from prod"`) {
		t.Errorf("resume edit gave:\n%s", got)
	}
	time.Sleep(1100 * time.Millisecond) // the edit writes the time of day, to the second
	edit(resumed)
}

// TestTimeoutNamesTheBlocker: --timeout's error names what it still waited
// for first (agents not checked in after a resume, although the kept
// deployments are all Ready), not only counts that look done.
func TestTimeoutNamesTheBlocker(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Progress
		want []string
	}{
		{name: "agents not back after a resume",
			p:    Progress{Clusters: map[string]string{"dev": "c-1", "prod": "prod"}, Bundles: 3, Ready: 6, Deployments: 6},
			want: []string{"within --timeout 3s of waiting", "still waiting on agents checked in 0/2", "deployments ready 6/6"}},
		{name: "a deployment failing names the first problem",
			p: Progress{Clusters: map[string]string{"dev": "c-1", "prod": "prod"}, CheckedIn: 2, Bundles: 3, Ready: 5, Deployments: 6,
				Problem: "Bundle fleet-default/examples-helm: ErrApplied: template: bad"},
			want: []string{"still waiting on deployments ready 5/6; first problem: Bundle fleet-default/examples-helm: ErrApplied: template: bad"}},
		{name: "nothing registered yet",
			p:    Progress{Clusters: map[string]string{}},
			want: []string{"still waiting on clusters registered 0/2", "deployments ready 0/0 (6 expected)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := timeoutError(3*time.Second, tc.p, nil, "/s").Error()
			for _, w := range tc.want {
				if !strings.Contains(err, w) {
					t.Errorf("error lacks %q:\n%s", w, err)
				}
			}
		})
	}
	err := timeoutError(time.Second, Progress{}, errors.New("connection refused"), "/s").Error()
	if !strings.Contains(err, "still waiting on reading the status: connection refused") {
		t.Errorf("error with a read failure: %s", err)
	}
}

// TestExampleWorkingCopyTracksOrigin: `git status` in the fresh working
// copy compares with origin/main instead of saying the upstream is gone,
// before anything is pushed over HTTP (the git server is not even up); an
// older working copy without origin/main gets it on the next run.
func TestExampleWorkingCopyTracksOrigin(t *testing.T) {
	ctx := context.Background()
	e := &Env{opts: Options{RepoRoot: repoRoot(), StateDir: t.TempDir()}, ports: portsFrom(DefaultBasePort)}
	if err := e.ensureExampleRepo(ctx); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		t.Helper()
		out, err := exec.Command("git", "-C", e.WorkingCopy(), "status").CombinedOutput()
		if err != nil {
			t.Fatalf("git status: %v: %s", err, out)
		}
		return string(out)
	}
	if st := status(); !strings.Contains(st, "up to date with 'origin/main'") || strings.Contains(st, "upstream is gone") {
		t.Errorf("git status of the new working copy:\n%s", st)
	}
	if err := git(ctx, "-C", e.WorkingCopy(), "update-ref", "-d", "refs/remotes/origin/main"); err != nil {
		t.Fatal(err)
	}
	if err := e.ensureExampleRepo(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(); !strings.Contains(st, "up to date with 'origin/main'") {
		t.Errorf("git status of a resumed working copy that had no origin/main:\n%s", st)
	}
}

// TestAlreadyRunningIsOneMessage: refusing to run next to a live `up` of the
// same state folder neither announces a resume nor ends with "run `fleet
// dev up` again to resume".
func TestAlreadyRunningIsOneMessage(t *testing.T) {
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte(`{"basePort":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stand-in `fleet dev up`: its command line contains "dev".
	cmd := exec.Command("/bin/bash", "-c", `exec -a "$0" sleep 600`, "fleet-dev-up-standin")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	eventually(t, 30*time.Second, "the stand-in runs", func() (bool, string) {
		cl := readCmdline(cmd.Process.Pid)
		return strings.Contains(cl, "dev"), cl
	})
	tbl := &procTable{path: filepath.Join(state, "pids.json"), Self: cmd.Process.Pid, Pids: map[string]int{}}
	if err := tbl.save(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err := Up(context.Background(), Options{RepoRoot: repoRoot(), StateDir: state, SkipBuild: true, Out: &out})
	if err == nil || !strings.Contains(err.Error(), "another `fleet dev up` is running") {
		t.Fatalf("Up next to a running one: %v", err)
	}
	if strings.Contains(err.Error(), "resume") || strings.Contains(out.String(), "Resuming") {
		t.Errorf("the refusal talks of resuming:\noutput: %s\nerror: %v", out.String(), err)
	}
	if _, serr := os.Stat(filepath.Join(state, "pids.json")); serr != nil {
		t.Errorf("the running one's pids.json is gone: %v", serr)
	}
}

// TestDownRequested: once `down` marks the folder (or removed it), a
// stopping `up` must not promise a resume.
func TestDownRequested(t *testing.T) {
	state := t.TempDir()
	opts := Options{RepoRoot: repoRoot(), StateDir: state}
	if !opts.DownRequested() {
		t.Error("a folder without state.json (removed by down) is not reported")
	}
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte(`{"basePort":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if opts.DownRequested() {
		t.Error("a kept state folder is reported as being removed")
	}
	if err := os.WriteFile(filepath.Join(state, downMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !opts.DownRequested() {
		t.Error("the down marker is not seen")
	}
}

// TestResumeHint: the hint names --state-dir (shell-quoted when needed) for
// a folder other than the default, so that pasting it resumes that folder.
func TestResumeHint(t *testing.T) {
	for _, tc := range []struct {
		name, stateDir, want string
	}{
		{name: "default", stateDir: "", want: "`bin/fleet dev up` (or `make quickstart`) resumes it, `bin/fleet dev down` removes it"},
		{name: "default named", stateDir: "/x/.fleet-dev", want: "`bin/fleet dev up` (or `make quickstart`) resumes it, `bin/fleet dev down` removes it"},
		{name: "other", stateDir: "/tmp/x/other", want: "`bin/fleet dev up --state-dir /tmp/x/other` resumes it, `bin/fleet dev down --state-dir /tmp/x/other` removes it"},
		{name: "quoted", stateDir: "/tmp/my state's", want: `` + "`bin/fleet dev up --state-dir '/tmp/my state'\\''s'` resumes it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Options{RepoRoot: "/x", StateDir: tc.stateDir}.ResumeHint()
			if !strings.Contains(got, tc.want) {
				t.Errorf("ResumeHint() = %q, want it to contain %q", got, tc.want)
			}
		})
	}
	stopped := (&Env{opts: Options{RepoRoot: "/x", StateDir: "/tmp/x/other"}}).Guide(GuideStopped)
	if !strings.Contains(stopped, "`bin/fleet dev up --state-dir /tmp/x/other`") || strings.Contains(stopped, "make quickstart") {
		t.Errorf("stopped guide of another state folder:\n%s", stopped)
	}
}
