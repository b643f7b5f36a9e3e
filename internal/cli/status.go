package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetgo/fleet/internal/statusview"
)

func init() { register(newStatusCmd) }

type statusFlags struct {
	once          bool
	allNamespaces bool
	interval      time.Duration
	noColor       bool
}

func newStatusCmd(g *Globals) *cobra.Command {
	f := &statusFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show GitRepos and HelmOps, their Bundles on every Cluster, and what is not Ready",
		Long: `status shows the fleet as seen from the manager cluster: the registered clusters with the
time each agent last checked in, then for every GitRepo and HelmOp a matrix of its bundles (rows) on the
clusters (columns) with the state of each deployment (Ready, NotReady, WaitApplied, ErrApplied,
Modified, OutOfSync, Offline for a deployment that is not Ready on a cluster that stopped checking in,
or "-" when the cluster has no deployment of the bundle: not targeted, or not created yet, e.g. held
back by the rollout's maxNew), and finally the first error of everything that is not Ready.

By default the view refreshes every --interval until interrupted: on a terminal it redraws the
screen; otherwise (a pipe or a file) it prints a plain snapshot, without colours or escape
sequences, when something changes and at least every 30s. --once prints one plain snapshot.`,
		Example: `  fleet status --once -n fleet-default
  fleet status -A --kubeconfig .fleet-dev/upstream/kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Client()
			if err != nil {
				return err
			}
			ns := g.Namespace
			if f.allNamespaces {
				ns = ""
			}
			snapshot := func(ctx context.Context, color bool) (frame, error) {
				fl, err := statusview.Load(ctx, c, ns)
				if err != nil {
					return frame{}, err
				}
				v := statusview.Build(fl)
				ro := statusview.RenderOptions{Now: time.Now(), Color: color, Workspace: ns, AllWorkspaces: ns == ""}
				if ns != "" && len(v.Clusters) == 0 && len(v.Groups) == 0 {
					ro.Elsewhere = otherWorkspaces(ctx, c, ns)
				}
				return renderFrame(v, ro)
			}
			out := cmd.OutOrStdout()
			if f.once {
				fr, err := snapshot(cmd.Context(), false)
				if err != nil {
					return err
				}
				_, err = out.Write(fr.text)
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			terminal := isTerminal(out)
			return live(ctx, out, liveOptions{every: f.interval, terminal: terminal, color: !f.noColor && terminal, repeat: plainRepeat}, snapshot)
		},
	}
	cmd.Flags().BoolVar(&f.once, "once", false, "print one plain snapshot and exit")
	cmd.Flags().BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "show every workspace, not only --namespace")
	cmd.Flags().DurationVar(&f.interval, "interval", 2*time.Second, "refresh interval of the live view")
	cmd.Flags().BoolVar(&f.noColor, "no-color", false, "do not colour states")
	return cmd
}

// otherWorkspaces are the workspaces other than ns that hold something, for
// the hint under an empty one; none when they cannot be listed (the hint
// then only says how to pick another).
func otherWorkspaces(ctx context.Context, c client.Reader, ns string) []string {
	all, err := statusview.Workspaces(ctx, c)
	if err != nil {
		return nil
	}
	return slices.DeleteFunc(all, func(w string) bool { return w == ns })
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
