package manager

// components lists the manager's controllers in set-up order. Each concern
// adds one entry here and keeps its code in its own package.
var components = []Component{
	{Name: "registration", Setup: setupRegistration, Unsharded: true},
	{Name: "targeting", Setup: setupTargeting},
	{Name: "cluster-status", Setup: setupClusterStatus, Unsharded: true},
	{Name: "gitops", Setup: setupGitOps},
	{Name: "helmop", Setup: setupHelmOp, CRD: "HelmOp", Enabled: func(o Options) bool { return !o.DisableHelmOps }},
	// Disabled or not: disabled, it releases what Schedules hold.
	{Name: "schedule", Setup: setupSchedule, Unsharded: true, CRD: "Schedule"},
	{Name: "operations", Setup: setupOperations},
}
