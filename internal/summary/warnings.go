package summary

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// A deployment can be deployed, monitored and ready and still need the
// user: its agent then reports the Deployed condition True with a reason
// and a message, e.g. StaleCopiesNotDeleted when copies of
// downstreamResources that left the list could not be deleted (the agent
// retries only that). It counts as Ready, since the release is deployed,
// so it shows in no state count; its warning is listed in the Bundle's
// Ready message instead, which kubectl, the GitRepo and the HelmOp show,
// without making a Ready Bundle not Ready.

// MaxWarningsShown caps the warnings named in one message; the count in
// front of them says how many there are.
const MaxWarningsShown = 3

// maxWarningReasons caps the reasons WarningMessage lists: agents choose
// the reasons, and could report a different one per cluster.
const maxWarningReasons = 5

// Warning is one deployment's warning (Name is its cluster,
// "<namespace>/<name>").
type Warning struct {
	Name, Reason, Message string
}

// DeploymentWarning is bd's warning: its Deployed condition when True
// with a message (cut to MaxAgentMessage), else false. A deploy error
// (Deployed=False) is not one: it makes the deployment ErrApplied.
func DeploymentWarning(bd *fleet.BundleDeployment) (reason, msg string, ok bool) {
	c := meta.FindStatusCondition(bd.Status.Conditions, fleet.ConditionDeployed)
	if c == nil || c.Status != metav1.ConditionTrue || c.Message == "" {
		return "", "", false
	}
	return c.Reason, AgentMessage(c.Message), true
}

// WarningMessage lists ws as the Ready message lists non-ready states:
// "<Reason>(<count>) [<Kind> <name>: <message>; ...]", one part per
// reason, at most MaxWarningsShown entries each (the first by name, so
// that the message does not change with the order of ws), parts sorted
// and joined with "; ", the first maxWarningReasons of them followed by
// "(and N more reasons)". Messages are cut to MaxAgentMessage. Empty
// without warnings.
func WarningMessage(kind string, ws []Warning) string {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b Warning) int { return strings.Compare(a.Name, b.Name) })
	byReason := map[string][]string{}
	count := map[string]int{}
	for _, w := range ws {
		count[w.Reason]++
		if len(byReason[w.Reason]) < MaxWarningsShown {
			byReason[w.Reason] = append(byReason[w.Reason], kind+" "+w.Name+": "+AgentMessage(w.Message))
		}
	}
	parts := make([]string, 0, len(count))
	for reason, n := range count {
		parts = append(parts, fmt.Sprintf("%s(%d) [%s]", reason, n, strings.Join(byReason[reason], "; ")))
	}
	sort.Strings(parts)
	more := ""
	if len(parts) > maxWarningReasons {
		more = fmt.Sprintf(" (and %d more reasons)", len(parts)-maxWarningReasons)
		parts = parts[:maxWarningReasons]
	}
	return strings.Join(parts, "; ") + more
}

// BundleWarning is the warning b's Ready message carries while b is
// Ready (Ready=True with a message, which the Bundle controller writes
// only for warnings), else "".
func BundleWarning(b *fleet.Bundle) string {
	c := meta.FindStatusCondition(b.Status.Conditions, fleet.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Message
}

// maxBundleWarning caps one Bundle's warning in its owner's message.
const maxBundleWarning = 2048

// BundleWarnings rolls the warnings of ready Bundles up for their owner
// (GitRepo, HelmOp): "Bundle <name>: <warning>" per Bundle, sorted by
// name, at most MaxWarningsShown, then "(and N more)". Each warning is cut
// to maxBundleWarning, so that three fit in one condition message. Empty
// when none has one. It only reads the Bundles, which may be the cache's
// own.
func BundleWarnings(bundles []*fleet.Bundle) string {
	var parts []string
	for _, b := range bundles {
		if w := BundleWarning(b); w != "" {
			parts = append(parts, "Bundle "+b.Name+": "+Cut(w, maxBundleWarning))
		}
	}
	sort.Strings(parts)
	more := ""
	if len(parts) > MaxWarningsShown {
		more = fmt.Sprintf(" (and %d more)", len(parts)-MaxWarningsShown)
		parts = parts[:MaxWarningsShown]
	}
	return strings.Join(parts, "; ") + more
}

// JoinMessages joins the non-empty messages with "; ".
func JoinMessages(msgs ...string) string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if m != "" {
			out = append(out, m)
		}
	}
	return strings.Join(out, "; ")
}
