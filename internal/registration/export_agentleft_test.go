package registration

// AgentLeftIn and its outcomes let the package's tests check, against an
// API server, what the removal of an agent waits for.
var AgentLeftIn = agentLeftIn

type AgentLeft = agentLeft

const (
	AgentGone      = agentGone
	AgentStopping  = agentStopping
	AgentRunning   = agentRunning
	AgentStuck     = agentStuck
	AgentStopLimit = agentStopLimit
)
