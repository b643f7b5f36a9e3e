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
		Long: `up builds bin/fleet, bin/fleet-controller and bin/fleet-agent (and kube-apiserver + etcd into
bin/controlplane on first use; when KUBEBUILDER_ASSETS is set they are taken from there, and up
stops if they are missing), starts three control planes, the manager and two agents, registers
one cluster agent-initiated (env=dev) and one manager-initiated (env=prod), serves the example
repository over HTTP and creates a GitRepo for it, then shows progress until every bundle is
Ready on both clusters.
It keeps running until Ctrl-C, which stops everything and keeps the state for the next run;
with --exit-when-ready it stops everything (keeping the state) as soon as every bundle is Ready.
A state folder that exists is resumed: the same clusters, credentials and registrations.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseIgnoredGlobals(cmd); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			opts.Out = out
			if !cmd.Flags().Changed("live") {
				opts.Live = isTerminal(out)
			}
			env, err := devenv.Up(ctx, opts)
			if err != nil {
				if ctx.Err() != nil {
					fmt.Fprintln(out, stoppedNotice(opts, "Interrupted; everything started was stopped"))
					return nil
				}
				return err
			}
			if exitAfterReady {
				env.Stop()
				fmt.Fprint(out, env.Guide(devenv.GuideStopped))
				return nil
			}
			fmt.Fprint(out, env.Guide(devenv.GuideRunning))
			fmt.Fprintln(out, "\nRunning. Press Ctrl-C to stop.")
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					fmt.Fprintln(out, "\nStopping agents, manager and clusters...")
					env.Stop()
					fmt.Fprintln(out, stoppedNotice(opts, "Stopped"))
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
	up.Flags().DurationVar(&opts.ReadyTimeout, "timeout", 0, "give up when not every bundle is Ready this long after the wait for it starts (after building and starting everything; 0: wait)")
	up.Flags().BoolVar(&exitAfterReady, "exit-when-ready", false, "stop everything (keeping the state) once every bundle is Ready, for scripts")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the local fleet and remove its state folder",
		Long: `down stops a running ` + "`fleet dev up`" + ` of the state folder (as Ctrl-C would), then any process an
earlier ` + "`up`" + ` left behind when it was killed (control planes, manager, agents, found through
the folder's pids.json), and removes the state folder: clusters, credentials, logs and the example
repository with its working copy, including commits not pushed. The next ` + "`up`" + ` starts from scratch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseIgnoredGlobals(cmd); err != nil {
				return err
			}
			opts.Out = cmd.OutOrStdout()
			return devenv.Down(cmd.Context(), opts)
		},
	}
	cmd.AddCommand(up, down)
	hideIgnoredGlobals(cmd)
	return groupCommand(cmd)
}

// ignoredGlobals are global flags `fleet dev` has no use for: it makes its
// own clusters and always uses the fleet-default workspace.
var ignoredGlobals = []string{"kubeconfig", "context", "namespace"}

// hideIgnoredGlobals shadows the ignored global flags with hidden ones of
// the same name on dev, so that the help of dev, up and down does not offer
// them; refuseIgnoredGlobals then turns their use into an error.
func hideIgnoredGlobals(dev *cobra.Command) {
	var unused string
	pf := dev.PersistentFlags()
	pf.StringVarP(&unused, "kubeconfig", "k", "", "not used by fleet dev")
	pf.StringVar(&unused, "context", "", "not used by fleet dev")
	pf.StringVarP(&unused, "namespace", "n", "", "not used by fleet dev")
	for _, name := range ignoredGlobals {
		_ = pf.MarkHidden(name)
	}
}

// refuseIgnoredGlobals: a flag silently ignored would make a user believe
// the quickstart used their cluster or workspace.
func refuseIgnoredGlobals(cmd *cobra.Command) error {
	for _, name := range ignoredGlobals {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("fleet dev does not use --%s: it runs its own clusters (kubeconfigs in the state folder) and the %s workspace", name, devenv.Workspace)
		}
	}
	return nil
}

// stoppedNotice ends what `up` printed when it stopped: the state is kept
// for a resume, unless `fleet dev down` stopped it to remove the state.
func stoppedNotice(opts devenv.Options, what string) string {
	if opts.DownRequested() {
		return what + "; `fleet dev down` is removing the state folder."
	}
	return what + "; the state is kept: " + opts.ResumeHint() + "."
}
