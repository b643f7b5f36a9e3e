package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetgo/fleet/internal/devenv"
)

func init() { register(newDevCmd) }

func newDevCmd(_ *Globals) *cobra.Command {
	opts := devenv.Options{}
	exitAfterReady := false
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole Fleet on this machine (quickstart)",
		Long: `dev runs a complete Fleet locally, with no existing cluster and no container engine:
a manager cluster and two downstream clusters (each a real kube-apiserver + etcd), the
fleet-controller and one fleet-agent per downstream cluster, and an example git repository
served over HTTP with a GitRepo deploying it to both clusters.`,
	}
	cmd.PersistentFlags().StringVar(&opts.StateDir, "state-dir", "", "state folder (default .fleet-dev in the repository)")
	cmd.PersistentFlags().StringVar(&opts.RepoRoot, "repo", "", "Fleet source tree (default: found from the working directory)")

	up := &cobra.Command{
		Use:   "up",
		Short: "Build, start (or resume) the local fleet and wait until every bundle is Ready",
		Long: `up builds bin/fleet-controller and bin/fleet-agent (and kube-apiserver + etcd into
bin/controlplane on first use, unless KUBEBUILDER_ASSETS names a directory that holds them),
starts three control planes, the manager and two agents, registers one cluster agent-initiated
(env=dev) and one manager-initiated (env=prod), serves the example repository over HTTP and
creates a GitRepo for it, then shows progress until every bundle is Ready on both clusters.
It keeps running until Ctrl-C, which stops everything and keeps the state for the next run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts.Out = cmd.OutOrStdout()
			if !cmd.Flags().Changed("live") {
				opts.Live = isTerminal(cmd.OutOrStdout())
			}
			env, err := devenv.Up(ctx, opts)
			if err != nil {
				if ctx.Err() != nil {
					fmt.Fprintln(cmd.OutOrStdout(), "Interrupted; everything started was stopped and the state kept.")
					return nil
				}
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), env.Guide())
			if exitAfterReady {
				env.Stop()
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), "\nRunning. Press Ctrl-C to stop.")
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					fmt.Fprintln(cmd.OutOrStdout(), "\nStopping agents, manager and clusters...")
					env.Stop()
					fmt.Fprintln(cmd.OutOrStdout(), "Stopped. `fleet dev up` resumes, `fleet dev down` removes the state.")
					return nil
				case <-tick.C:
					if err := env.Failed(); err != nil {
						env.Stop()
						return err
					}
				}
			}
		},
	}
	up.Flags().IntVar(&opts.BasePort, "base-port", 0, fmt.Sprintf("first of the fixed ports (API servers +0..2, etcd +10..15, git +20); default %d, or the state folder's", devenv.DefaultBasePort))
	up.Flags().BoolVar(&opts.SkipBuild, "no-build", false, "use the binaries already in bin/")
	up.Flags().BoolVar(&opts.Live, "live", false, "redraw the fleet status while waiting (default: when the output is a terminal)")
	up.Flags().DurationVar(&opts.ReadyTimeout, "timeout", 0, "give up when not every bundle is Ready after this long (0: wait)")
	up.Flags().BoolVar(&exitAfterReady, "exit-when-ready", false, "stop everything (keeping the state) once every bundle is Ready, for scripts")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the local fleet and remove its state folder",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			return devenv.Down(cmd.Context(), opts)
		},
	}
	cmd.AddCommand(up, down)
	return cmd
}
