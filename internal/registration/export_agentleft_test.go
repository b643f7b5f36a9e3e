package registration

// AgentLeftIn and its outcomes let the package's tests check, against an
// API server, what the removal of an agent waits for.
var AgentLeftIn = agentLeftIn

// RemoveAgentIn and AgentNamespaces let them check what a removal that
// stopped waiting keeps, and that a later pass finds and finishes it.
var (
	RemoveAgentIn   = removeAgentIn
	AgentNamespaces = agentNamespaces
)

type AgentLeft = agentLeft

const (
	AgentGone      = agentGone
	AgentStopping  = agentStopping
	AgentRunning   = agentRunning
	AgentStuck     = agentStuck
	AgentStopLimit = agentStopLimit
)
