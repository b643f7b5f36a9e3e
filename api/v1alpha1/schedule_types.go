package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func init() {
	register(&Schedule{}, &ScheduleList{})
}

// Schedule limits when the BundleDeployments of the clusters it targets
// may change: windows that open at each time of a cron expression and
// stay open for a duration (Rancher Fleet v0.14, experimental). The
// manager acts on Schedules only when enabled (env
// EXPERIMENTAL_SCHEDULES=true or --schedules); the CRD is always
// installed so that Rancher's manifests apply. Targeted Clusters get
// status.scheduled, and status.activeSchedule while a window is open.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=fleet
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Duration",type=string,JSONPath=`.spec.duration`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="NextStart",type=string,JSONPath=`.status.nextStartTime`
type Schedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ScheduleSpec `json:"spec,omitempty"`
	// +optional
	Status ScheduleStatus `json:"status,omitempty"`
}

// ScheduleList is a list of Schedules.
//
// +kubebuilder:object:root=true
type ScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Schedule `json:"items"`
}

// ScheduleSpec says when windows open, how long they last and which
// clusters they apply to.
type ScheduleSpec struct {
	// Schedule is a Quartz-style cron expression with a seconds field
	// (seconds minutes hours day-of-month month day-of-week [year]), e.g.
	// "0 0 22 * * *" for 22:00:00 every day. Each time it fires, a window
	// opens.
	// +optional
	Schedule string `json:"schedule,omitempty"`
	// Duration is how long each window stays open, a Go duration (1h30m).
	// It must be shorter than the time between two consecutive starts.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self == '0' || (self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) <= duration('2562047h'))",message="must be a valid Go duration using units ns, us, µs, ms, s, m, h (e.g. 15s, 5m, 2h, 1h30m); units like d (days) or w (weeks) are not supported"
	Duration metav1.Duration `json:"duration,omitempty"`
	// Location is the IANA time zone the cron expression is read in
	// (Europe/Berlin); empty is the fleet-controller's local zone (UTC in
	// its container unless TZ is set).
	// +optional
	Location string `json:"location,omitempty"`
	// Targets are the clusters, of the Schedule's namespace, it applies to.
	// +optional
	Targets ScheduleTargets `json:"targets,omitempty"`
}

// ScheduleStatus is the observed state of a Schedule.
type ScheduleStatus struct {
	// Active is true while a window is open.
	// +optional
	Active bool `json:"active,omitempty"`
	// NextStartTime is when the next window opens.
	// +optional
	NextStartTime metav1.Time `json:"nextStartTime,omitempty"`
	// Conditions: Ready is False, with the reason, while the spec is
	// invalid (cron expression, location, duration, selectors).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []ScheduleCondition `json:"conditions,omitempty"`
	// MatchingClusters are the names of the clusters the Schedule targets.
	// +optional
	MatchingClusters []string `json:"matchingClusters,omitempty"`
}

// ScheduleCondition is a condition of a Schedule. Only type and status
// are required: Rancher Fleet writes wrangler conditions (lastUpdateTime,
// often no reason, message or lastTransitionTime), and a Schedule it last
// wrote must stay writable (finalizer, labels) on API servers that
// validate the whole object on every update.
type ScheduleCondition struct {
	// Type of the condition (Ready).
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status metav1.ConditionStatus `json:"status"`
	// ObservedGeneration is the spec generation the condition was set for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastTransitionTime is when the status last changed.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// LastUpdateTime is written by Rancher Fleet only (RFC 3339).
	// +optional
	LastUpdateTime string `json:"lastUpdateTime,omitempty"`
	// Reason is a CamelCase word for the status.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why, for people.
	// +optional
	Message string `json:"message,omitempty"`
}

// ScheduleTargets lists the clusters a Schedule applies to.
type ScheduleTargets struct {
	// Clusters: a cluster is targeted when it matches any entry.
	// +optional
	Clusters []ScheduleTarget `json:"clusters,omitempty"`
}

// ScheduleTarget chooses clusters as a GitRepo target does: every field
// that is set must match; an entry with none set matches no cluster.
type ScheduleTarget struct {
	// Name is the name of this target.
	// +optional
	// +nullable
	Name string `json:"name,omitempty"`
	// ClusterName is the name of a cluster.
	// +optional
	// +nullable
	ClusterName string `json:"clusterName,omitempty"`
	// ClusterSelector is a label selector to select clusters.
	// +optional
	// +nullable
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// ClusterGroup is the name of a cluster group in the same namespace as
	// the clusters.
	// +optional
	// +nullable
	ClusterGroup string `json:"clusterGroup,omitempty"`
	// ClusterGroupSelector is a label selector to select cluster groups.
	// +optional
	// +nullable
	ClusterGroupSelector *metav1.LabelSelector `json:"clusterGroupSelector,omitempty"`
}
