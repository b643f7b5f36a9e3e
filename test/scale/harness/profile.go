package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/fleetgo/fleet/internal/testenv"
)

// profiler takes the CPU profiles of a measured phase: the manager's and the
// agents' (from their net/http/pprof) and the API servers' (from their own
// /debug/pprof, read as admin), since most of a real-apply rollout's CPU is
// the API servers'.
type profiler struct {
	// seconds is each profile's length; negative disables profiling.
	seconds    int
	dir        string
	log        io.Writer
	children   map[string]*child
	apiServers map[string]*testenv.Cluster

	wg sync.WaitGroup
}

// during starts one profile of each process, named <role>-cpu-<phase>.pprof,
// and lists their paths in res.
func (p *profiler) during(ctx context.Context, phase string, res *Result) {
	if p.seconds < 0 {
		return
	}
	start := func(role string, take func(path string) error) {
		path := filepath.Join(p.dir, role+"-cpu-"+phase+".pprof")
		res.Profiles = append(res.Profiles, path)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := take(path); err != nil {
				_, _ = fmt.Fprintf(p.log, "%s CPU profile: %v\n", role, err)
			}
		}()
	}
	for role, c := range p.children {
		if c == nil {
			continue
		}
		start(role, func(path string) error {
			return c.profile(ctx, fmt.Sprintf("profile?seconds=%d", p.seconds), path)
		})
	}
	for role, cl := range p.apiServers {
		if cl == nil {
			continue
		}
		start(role, func(path string) error { return APIServerProfile(ctx, cl.Clientset, p.seconds, path) })
	}
}

// wait returns when every profile started has been written.
func (p *profiler) wait() { p.wg.Wait() }

// profile fetches a pprof profile ("profile?seconds=N", "heap") into path.
func (c *child) profile(ctx context.Context, what, path string) error {
	if c.pprof == "" {
		return fmt.Errorf("%s has no pprof address", c.role)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.pprof+"/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: %s", what, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// APIServerProfile fetches a CPU profile of a kube-apiserver, taken over
// the next seconds, into path.
func APIServerProfile(ctx context.Context, cs kubernetes.Interface, seconds int, path string) error {
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
