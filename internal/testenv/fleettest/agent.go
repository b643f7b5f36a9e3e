package fleettest

import (
	"bytes"
	"context"
	"time"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent"
	"github.com/fleetgo/fleet/internal/cli"
	"github.com/fleetgo/fleet/internal/testenv"
)

// RegisterAgent registers down with the manager cluster up as a user does
// (InstallBootstrap), runs a fleet-agent for down (5 s check-ins) until ctx
// ends, and waits up to 2 minutes for its Cluster (the one with b.Labels)
// to check in. done receives what the agent returned once it stopped.
func RegisterAgent(ctx context.Context, up, down *testenv.Cluster, b Bootstrap) (cluster fleet.Cluster, done <-chan error, err error) {
	if err := InstallBootstrap(ctx, up.Client, down.Client, b); err != nil {
		return cluster, nil, err
	}
	stopped := make(chan error, 1)
	go func() {
		stopped <- agent.Run(ctx, agent.Options{Downstream: down.Config, CheckinInterval: 5 * time.Second, FirstCheckinDelay: time.Second})
	}()
	cluster, err = WaitForCluster(ctx, up.Client, b.Workspace, b.Labels, 120*time.Second)
	return cluster, stopped, err
}

// RunFleet runs the fleet CLI in-process against the cluster of kubeconfig
// and returns what it printed.
func RunFleet(kubeconfig string, args ...string) (string, error) {
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	err := root.Execute()
	return out.String(), err
}
