package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
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

By default the view refreshes until interrupted; --once prints one plain snapshot.`,
		Example: `  fleet status --once -n fleet-default
  fleet status -A --kubeconfig .fleet-dev/upstream/kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Client()
			if err != nil {
				return explainNoKubeconfig(err)
			}
			ns := g.Namespace
			if f.allNamespaces {
				ns = ""
			}
			snapshot := func(ctx context.Context, color bool) ([]byte, error) {
				fl, err := statusview.Load(ctx, c, ns)
				if err != nil {
					return nil, err
				}
				v := statusview.Build(fl)
				ro := statusview.RenderOptions{Now: time.Now(), Color: color, Workspace: ns, AllWorkspaces: ns == ""}
				if ns != "" && len(v.Clusters) == 0 && len(v.Groups) == 0 {
					ro.Elsewhere = otherWorkspaces(ctx, c, ns)
				}
				var b bytes.Buffer
				err = statusview.Render(&b, v, ro)
				return b.Bytes(), err
			}
			out := cmd.OutOrStdout()
			if f.once {
				b, err := snapshot(cmd.Context(), false)
				if err != nil {
					return err
				}
				_, err = out.Write(b)
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return live(ctx, out, f.interval, !f.noColor && isTerminal(out), snapshot)
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

// explainNoKubeconfig replaces client-go's "no configuration has been
// provided, try setting KUBERNETES_MASTER" with the ways this CLI takes a
// kubeconfig, including the quickstart's.
func explainNoKubeconfig(err error) error {
	if !clientcmd.IsEmptyConfig(err) {
		return err
	}
	why := "neither is set and ~/.kube/config does not exist"
	if env := os.Getenv("KUBECONFIG"); env != "" {
		// client-go skips files of KUBECONFIG that do not exist: a
		// relative path exported in another directory, say.
		why = fmt.Sprintf("KUBECONFIG=%s names no existing file", env)
	}
	return errors.New("no kubeconfig for the manager cluster: pass --kubeconfig (-k) or set KUBECONFIG " +
		"(" + why + "). For the quickstart (`make quickstart`) it is " +
		".fleet-dev/upstream/kubeconfig in the repository: bin/fleet status -k .fleet-dev/upstream/kubeconfig -n fleet-default")
}

// live redraws the whole screen on every refresh. A failed refresh keeps the
// last picture and shows the error above it, so that a restarting API server
// does not end the view.
func live(ctx context.Context, out io.Writer, every time.Duration, color bool,
	snapshot func(context.Context, bool) ([]byte, error)) error {
	if every <= 0 {
		every = 2 * time.Second
	}
	var last []byte
	for {
		b, err := snapshot(ctx, color)
		header := fmt.Sprintf("fleet status — %s — refreshing every %s, Ctrl-C to quit\n\n", time.Now().Format("15:04:05"), every)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			header += fmt.Sprintf("refresh failed: %v\n\n", err)
			b = last
		} else {
			last = b
		}
		if _, werr := fmt.Fprint(out, "\x1b[H\x1b[2J"+header+string(b)); werr != nil {
			return werr
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
