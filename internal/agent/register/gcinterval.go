package register

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetgo/fleet/internal/scheme"
)

// DefaultGCInterval is how often the agent removes releases whose
// BundleDeployment is gone when its configuration sets no interval:
// Rancher Fleet's default.
const DefaultGCInterval = 15 * time.Minute

// GCInterval is the interval garbageCollectionInterval sets: a Go duration
// ("15m", "1h30m"), the format Rancher Fleet's agent reads. Empty or zero
// means the default, as in Rancher Fleet (its zero is "unset").
//
// A value that is not a duration, or is negative, gives the default too,
// with an error that says so, for the caller to log: a typo in the
// ConfigMap must not stop the agent from deploying (it would fail the same
// way on every restart), and collecting at the default interval is what
// an unconfigured agent does.
func (c AgentConfig) GCInterval() (time.Duration, error) {
	v := c.GarbageCollectionInterval
	if v == "" {
		return DefaultGCInterval, nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return DefaultGCInterval, fmt.Errorf("configmap %s: garbageCollectionInterval %q is not a duration such as 15m or 1h", ConfigMapName, v)
	case d < 0:
		return DefaultGCInterval, fmt.Errorf("configmap %s: garbageCollectionInterval %q is negative", ConfigMapName, v)
	case d == 0:
		return DefaultGCInterval, nil
	}
	return d, nil
}

// LoadGCInterval is the garbage collection interval of the agent running
// in namespace ns of the cluster cfg reaches: the garbageCollectionInterval
// of ConfigMap fleet-agent there (see GCInterval), else DefaultGCInterval.
// It is read when the agent starts deploying, like Rancher Fleet's agent
// reads it at start: a change applies once the agent restarts.
//
// A ConfigMap whose config is not valid JSON, or whose interval is not
// valid, gives the default and a log line naming the problem: the agent
// still deploys. Only a failure to read the ConfigMap is an error, so
// that the agent retries instead of silently running at an interval that
// was not configured.
func LoadGCInterval(ctx context.Context, cfg *rest.Config, ns string) (time.Duration, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return 0, err
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ConfigMapName}, cm); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("reading configmap %s: %w", ConfigMapName, err)
	}
	d, err := gcIntervalOf(cm)
	l := log.FromContext(ctx)
	switch {
	case err != nil:
		l.Info("ignoring the garbage collection interval of the agent config", "error", err.Error(), "interval", d.String())
	case d != DefaultGCInterval:
		l.Info("garbage collection interval from the agent config", "interval", d.String())
	}
	return d, nil
}

// gcIntervalOf is GCInterval of ConfigMap cm (empty when it does not
// exist); a config that is not valid JSON gives the default and its error.
func gcIntervalOf(cm *corev1.ConfigMap) (time.Duration, error) {
	cfg, err := decodeConfig(cm)
	if err != nil {
		return DefaultGCInterval, err
	}
	return cfg.GCInterval()
}
