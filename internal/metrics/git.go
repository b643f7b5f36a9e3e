package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gitFetchBuckets cover a fast ls-remote (tens of ms) up to the default
// git timeout and beyond.
var gitFetchBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// gitMetrics are the per-GitRepo latest-commit lookup counters and
// durations. They are kept per GitRepo and dropped by the scrape that no
// longer sees the GitRepo in any cache.
type gitMetrics struct {
	success, failure *prometheus.CounterVec
	duration         *prometheus.HistogramVec

	mu   sync.Mutex
	keys map[string][2]string
}

var git = newGitMetrics()

func newGitMetrics() *gitMetrics {
	l := []string{"name", "namespace"}
	return &gitMetrics{
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_gitrepo_fetch_latest_commit_success_total",
			Help: "Successful lookups of a GitRepo's latest commit.",
		}, l),
		failure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_gitrepo_fetch_latest_commit_failure_total",
			Help: "Failed lookups of a GitRepo's latest commit.",
		}, l),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleet_gitrepo_fetch_latest_commit_duration_seconds",
			Help:    "Duration of lookups of a GitRepo's latest commit.",
			Buckets: gitFetchBuckets,
		}, l),
		keys: map[string][2]string{},
	}
}

// ObserveGitFetch records one latest-commit lookup of GitRepo
// namespace/name that took d and failed when err != nil. The GITOPS
// controller calls it after every poll.
func ObserveGitFetch(namespace, name string, d time.Duration, err error) {
	register()
	git.observe(namespace, name, d, err)
}

func (g *gitMetrics) observe(namespace, name string, d time.Duration, err error) {
	g.mu.Lock()
	g.keys[namespace+"/"+name] = [2]string{name, namespace}
	g.mu.Unlock()
	if err != nil {
		g.failure.WithLabelValues(name, namespace).Inc()
	} else {
		g.success.WithLabelValues(name, namespace).Inc()
		// Make the failure series exist at 0, so rate() works from the start.
		g.failure.WithLabelValues(name, namespace)
	}
	g.duration.WithLabelValues(name, namespace).Observe(d.Seconds())
}

// prune forgets the series of GitRepos not in present ("ns/name").
func (g *gitMetrics) prune(present map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, lv := range g.keys {
		if present[k] {
			continue
		}
		delete(g.keys, k)
		g.success.DeleteLabelValues(lv[0], lv[1])
		g.failure.DeleteLabelValues(lv[0], lv[1])
		g.duration.DeleteLabelValues(lv[0], lv[1])
	}
}

func (g *gitMetrics) Describe(ch chan<- *prometheus.Desc) {
	g.success.Describe(ch)
	g.failure.Describe(ch)
	g.duration.Describe(ch)
}

func (g *gitMetrics) Collect(ch chan<- prometheus.Metric) {
	g.success.Collect(ch)
	g.failure.Collect(ch)
	g.duration.Collect(ch)
}
