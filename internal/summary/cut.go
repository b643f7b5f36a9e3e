package summary

import "unicode/utf8"

// Agents write their conditions' messages, one BundleDeployment each, and
// the CRD lets each be up to 32768 bytes. The manager copies them into
// Bundle, GitRepo and HelmOp status, several at a time: copied whole, a
// few long ones would make a composed message longer than the CRD allows,
// and the API server would then refuse every status write of that object,
// freezing it for all its clusters. So each agent-written message is cut
// to MaxAgentMessage and every composed condition message to
// MaxConditionMessage.
const (
	// MaxAgentMessage caps one agent-written message copied into a
	// manager-written status.
	MaxAgentMessage = 1024
	// MaxConditionMessage caps a condition message the manager composes;
	// it is well under the CRD's 32768 bytes.
	MaxConditionMessage = 8192
)

// cutMarker ends a message that was cut, so that users know there is more
// (on the BundleDeployment or in the agent's log).
const cutMarker = " (cut)"

// Cut returns msg when it is at most max bytes long, else its start cut on
// a rune boundary followed by " (cut)", max bytes at most in all.
func Cut(msg string, max int) string {
	if len(msg) <= max {
		return msg
	}
	n := max - len(cutMarker)
	if n < 0 {
		n = 0
	}
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n] + cutMarker
}

// AgentMessage is an agent-written message as the manager copies it.
func AgentMessage(msg string) string { return Cut(msg, MaxAgentMessage) }

// ConditionMessage is a composed condition message as it is written.
func ConditionMessage(msg string) string { return Cut(msg, MaxConditionMessage) }
