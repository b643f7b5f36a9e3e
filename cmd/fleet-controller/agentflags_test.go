package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/fleetgo/fleet/internal/registration"
)

// TestAgentFlagsTakeRancherDurations: the agent lease flags take what
// Rancher's chart takes for agent.leaderElection.*: decimals (1.5m) and 0,
// which is the agent's default; a negative or impossible timing is still
// refused with the flag named.
func TestAgentFlagsTakeRancherDurations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults"},
		{name: "zero is the default", args: []string{"--agent-leader-election-lease-duration=0", "--agent-leader-election-renew-deadline=0s", "--agent-leader-election-retry-period=0"}},
		{name: "decimals", args: []string{"--agent-leader-election-lease-duration=1.5m", "--agent-leader-election-renew-deadline=60.5s"}},
		{name: "negative", args: []string{"--agent-leader-election-retry-period=-1s"}, wantErr: "must not be negative"},
		{name: "renew over lease", args: []string{"--agent-leader-election-lease-duration=0", "--agent-leader-election-renew-deadline=1m"}, wantErr: "leaseDuration > renewDeadline"},
		{name: "no workers", args: []string{"--agent-workers=0"}, wantErr: "--agent-workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s registration.AgentSettings
			fs := pflag.NewFlagSet("fleet-controller", pflag.ContinueOnError)
			s.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("parsing %q: %v", tc.args, err)
			}
			err := validateAgentFlags(s)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("%q refused: %v", tc.args, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("%q: error %v, want one saying %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
