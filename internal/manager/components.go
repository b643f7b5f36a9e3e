package manager

// components lists the manager's controllers in set-up order. Each concern
// adds one entry here and keeps its code in its own package.
var components = []Component{
	{Name: "registration", Setup: setupRegistration, Unsharded: true},
	{Name: "targeting", Setup: setupTargeting},
	{Name: "cluster-status", Setup: setupClusterStatus, Unsharded: true},
	{Name: "gitops", Setup: setupGitOps},
	{Name: "helmop", Setup: setupHelmOp, CRD: "HelmOp", Enabled: func(o Options) bool { return !o.DisableHelmOps }},
	{Name: "schedule", Setup: setupSchedule, Unsharded: true, CRD: "Schedule", Enabled: func(o Options) bool { return o.Schedules }},
	// Disabled, deleted Schedules are still released; without their CRD
	// there is none, so nothing is awaited.
	{Name: "schedule-disabled", Setup: setupScheduleDisabled, Unsharded: true, CRD: "Schedule", SkipWithoutCRD: true,
		Enabled: func(o Options) bool { return !o.Schedules }},
	{Name: "operations", Setup: setupOperations},
}
