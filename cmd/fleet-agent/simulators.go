package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/agent/simulator"
	"github.com/fleetgo/fleet/internal/scheme"
)

// simulatorFlags are --simulators and --simulate-apply, with the
// --checkin-interval every simulated agent reports in at, as a real agent
// does.
type simulatorFlags struct {
	count   int
	apply   string
	checkin time.Duration
}

// runSimulators runs N simulated agents in this process (Fleet's
// `--simulators`, see docs/scale.md). They all register with the
// fleet-agent-bootstrap Secret of the agent namespace, which is kept (each
// simulated agent keeps its own credential in memory only), and each
// gets the clientID <config clientID or first segment of the kube-system
// UID>-sim-<index>.
func runSimulators(ctx context.Context, downstream *rest.Config, ns string, f simulatorFlags) error {
	mode, err := simulator.ParseMode(f.apply)
	if err != nil {
		return err
	}
	c, err := client.New(downstream, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: register.BootstrapSecretName}, s); err != nil {
		return fmt.Errorf("simulators need secret %s/%s: %w", ns, register.BootstrapSecretName, err)
	}
	b, err := register.ParseBootstrap(s.Data)
	if err != nil {
		return err
	}
	cfg, err := register.LoadConfig(ctx, c, ns)
	if err != nil {
		return err
	}
	prefix := cfg.ClientID
	if prefix == "" {
		kube := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: "kube-system"}, kube); err != nil {
			return fmt.Errorf("reading kube-system for the simulators' identity: %w", err)
		}
		prefix, _, _ = strings.Cut(string(kube.UID), "-")
	}
	sim, err := simulator.New(simulator.Options{Count: f.count, Bootstrap: b, Mode: mode, Downstream: downstream,
		ClientIDPrefix: prefix + "-sim", Labels: cfg.Labels, CheckinInterval: f.checkin})
	if err != nil {
		return err
	}
	return sim.Run(ctx)
}
