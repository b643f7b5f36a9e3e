package registration

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/fleetgo/fleet/internal/agent/register"
)

// agentDefaultReplicas is the replicas of the agent Deployment when
// AgentSettings sets none: one, as every agent imported before ran.
const agentDefaultReplicas = 1

// AgentSettings are the fleet-agent Deployment settings of Rancher's fleet
// chart values agentImage.imagePullPolicy, agent.replicas,
// agent.reconciler.workers.bundledeployment and agent.leaderElection. A
// zero field, or one equal to the agent's own default (register.Default*),
// is not written into the Deployment at all (see AgentObjects): the agent
// objects, their agentConfigHash, and so every agent imported before, stay
// as they are unless a setting really changes.
type AgentSettings struct {
	// ImagePullPolicy of the agent container; "" or IfNotPresent is not
	// written (Kubernetes' default for a tagged image).
	ImagePullPolicy corev1.PullPolicy
	// Replicas of the agent Deployment (0: 1). Replicas compete for Lease
	// fleet-agent in the agent namespace; one acts.
	Replicas int32
	// Workers is the agent's BUNDLEDEPLOYMENT_RECONCILER_WORKERS (0: the
	// agent's register.DefaultWorkers).
	Workers int
	// LeaseDuration, RenewDeadline and RetryPeriod are the agent's
	// CATTLE_ELECTION_LEASE_DURATION, _RENEW_DEADLINE and _RETRY_PERIOD
	// (0: the agent's register.DefaultLeaseDuration, DefaultRenewDeadline
	// and DefaultRetryPeriod).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Validate refuses settings an agent could not run with, so that a typo
// in the chart values stops the manager with a message instead of
// rolling every imported agent out into a crash loop. Unset timings count
// as the agent's defaults, as the agent would see them.
func (s AgentSettings) Validate() error {
	switch s.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("agent image pull policy %q is not one of Always, IfNotPresent, Never", s.ImagePullPolicy)
	}
	if s.Replicas < 0 {
		return fmt.Errorf("agent replicas %d is negative", s.Replicas)
	}
	if s.Workers < 0 {
		return fmt.Errorf("agent workers %d is negative", s.Workers)
	}
	if s.LeaseDuration < 0 || s.RenewDeadline < 0 || s.RetryPeriod < 0 {
		return fmt.Errorf("agent leader election timings must not be negative (leaseDuration %v, renewDeadline %v, retryPeriod %v)",
			s.LeaseDuration, s.RenewDeadline, s.RetryPeriod)
	}
	lease, renew, retry := orDefault(s.LeaseDuration, register.DefaultLeaseDuration),
		orDefault(s.RenewDeadline, register.DefaultRenewDeadline), orDefault(s.RetryPeriod, register.DefaultRetryPeriod)
	// client-go's leader elector refuses anything else, and the agent
	// would exit at start.
	if lease <= renew || renew <= time.Duration(leaderelection.JitterFactor*float64(retry)) {
		return fmt.Errorf("agent leader election needs leaseDuration > renewDeadline > %v × retryPeriod, have %v, %v, %v",
			leaderelection.JitterFactor, lease, renew, retry)
	}
	return nil
}

// AddFlags adds fleet-controller's flags of the agents installed on
// imported clusters, which Rancher's fleet chart sets through agentImage
// and agent.*. Their defaults are the agent's own, which the manager does
// not write into the agent Deployment.
func (s *AgentSettings) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar((*string)(&s.ImagePullPolicy), "agent-image-pull-policy", "", "imagePullPolicy of agents installed on imported clusters: Always, IfNotPresent or Never; empty or IfNotPresent: not set (Kubernetes' default, IfNotPresent for a tagged image)")
	fs.Int32Var(&s.Replicas, "agent-replicas", agentDefaultReplicas, "replicas of agents installed on imported clusters (one acts, holding Lease fleet-agent)")
	fs.IntVar(&s.Workers, "agent-workers", register.DefaultWorkers, "concurrent BundleDeployment reconciles of agents installed on imported clusters (their BUNDLEDEPLOYMENT_RECONCILER_WORKERS)")
	fs.DurationVar(&s.LeaseDuration, "agent-leader-election-lease-duration", register.DefaultLeaseDuration, "lease duration of agents installed on imported clusters (their CATTLE_ELECTION_LEASE_DURATION)")
	fs.DurationVar(&s.RenewDeadline, "agent-leader-election-renew-deadline", register.DefaultRenewDeadline, "lease renew deadline of agents installed on imported clusters (their CATTLE_ELECTION_RENEW_DEADLINE)")
	fs.DurationVar(&s.RetryPeriod, "agent-leader-election-retry-period", register.DefaultRetryPeriod, "lease retry period of agents installed on imported clusters (their CATTLE_ELECTION_RETRY_PERIOD)")
}

// orDefault is d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
