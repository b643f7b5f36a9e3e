package register

import "time"

// The agent's own defaults: fleet-agent's flags and agent.Options fall
// back to them. They live here, beside DefaultGCInterval, because the
// manager needs them too and imports only this package of the agent: it
// leaves a setting equal to the agent's default out of the manifest of an
// imported agent, so that the default changes no agent imported before.
// Changing one changes what every agent installed without that setting
// does.
const (
	// DefaultWorkers is the number of concurrent BundleDeployment
	// reconciles (BUNDLEDEPLOYMENT_RECONCILER_WORKERS), Rancher Fleet's.
	DefaultWorkers = 50
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod
	// are the timings of Lease fleet-agent (CATTLE_ELECTION_LEASE_DURATION,
	// _RENEW_DEADLINE and _RETRY_PERIOD), Rancher Fleet's.
	DefaultLeaseDuration = 30 * time.Second
	DefaultRenewDeadline = 25 * time.Second
	DefaultRetryPeriod   = 10 * time.Second
	// DefaultCheckinInterval is how often the agent reports in
	// (CHECKIN_INTERVAL) when nothing sets it.
	DefaultCheckinInterval = 15 * time.Minute
)
