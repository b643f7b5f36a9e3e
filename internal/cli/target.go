package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/controller/bundle"
	"github.com/fleetgo/fleet/internal/target"
)

func init() { register(newTargetCmd) }

// TargetFlags are the flags of `fleet target`.
type TargetFlags struct {
	BundleFile string
	Output     string
}

func newTargetCmd(g *Globals) *cobra.Command {
	f := &TargetFlags{}
	cmd := &cobra.Command{
		Use:   "target [BUNDLE]",
		Short: "Show which clusters a bundle targets, with which options and partition, without writing",
		Long: `target computes what the manager would do with a Bundle: which clusters match, which target and
customizations apply, the resulting options, the rollout partition and whether the deployment would be
created, promoted, held back or deleted. The Bundle is read from the cluster (BUNDLE in the namespace
given by -n) or from a file with -b (YAML or JSON, several documents allowed, "-" for stdin), for example
the output of 'fleet apply -o -'. Nothing is written.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (f.BundleFile == "") == (len(args) == 0) {
				return fmt.Errorf("give either a bundle name or -b FILE")
			}
			c, err := g.Client()
			if err != nil {
				return err
			}
			var bundles []*fleet.Bundle
			if f.BundleFile != "" {
				if bundles, err = readBundles(cmd.InOrStdin(), f.BundleFile, g.Namespace); err != nil {
					return err
				}
			} else {
				b := &fleet.Bundle{}
				if err := c.Get(cmd.Context(), types.NamespacedName{Namespace: g.Namespace, Name: args[0]}, b); err != nil {
					return err
				}
				bundles = []*fleet.Bundle{b}
			}
			return RunTarget(cmd.Context(), c, bundles, f.Output, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVarP(&f.BundleFile, "bundle-file", "b", "", `read the Bundle(s) from this file ("-" for stdin)`)
	cmd.Flags().StringVarP(&f.Output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func readBundles(stdin io.Reader, file, defaultNS string) ([]*fleet.Bundle, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*fleet.Bundle
	for {
		b := &fleet.Bundle{}
		if err := dec.Decode(b); err != nil {
			if err == io.EOF {
				break
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if b.Name == "" && len(b.Spec.Resources) == 0 && len(b.Spec.Targets) == 0 {
			continue // empty document
		}
		if b.Kind != "" && b.Kind != "Bundle" {
			return nil, fmt.Errorf("%s: expected kind Bundle, got %s", file, b.Kind)
		}
		if b.Namespace == "" {
			b.Namespace = defaultNS
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no Bundle found", file)
	}
	return out, nil
}

// TargetRow is one cluster of one bundle in `fleet target` output.
type TargetRow struct {
	Bundle         string                         `json:"bundle"`
	Cluster        string                         `json:"cluster"`
	Target         string                         `json:"target,omitempty"`
	Customizations []string                       `json:"customizations,omitempty"`
	Partitions     []string                       `json:"partitions,omitempty"`
	Action         string                         `json:"action"`
	DeploymentID   string                         `json:"deploymentID,omitempty"`
	Paused         bool                           `json:"paused,omitempty"`
	Offline        bool                           `json:"offline,omitempty"`
	Error          string                         `json:"error,omitempty"`
	Options        *fleet.BundleDeploymentOptions `json:"options,omitempty"`
}

// RunTarget previews each bundle and prints the result.
func RunTarget(ctx context.Context, c client.Reader, bundles []*fleet.Bundle, output string, w io.Writer) error {
	var rows []TargetRow
	for _, b := range bundles {
		p, err := bundle.PreviewBundle(ctx, c, b)
		if err != nil {
			return fmt.Errorf("bundle %s/%s: %w", b.Namespace, b.Name, err)
		}
		rows = append(rows, previewRows(b, p)...)
	}
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "yaml":
		data, err := yaml.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case "table", "":
		return printTargetTable(w, rows)
	}
	return fmt.Errorf("unknown output format %q", output)
}

func previewRows(b *fleet.Bundle, p *bundle.Preview) []TargetRow {
	key := b.Namespace + "/" + b.Name
	parts := map[*target.Plan][]string{}
	for _, part := range p.Rollout.Partitions {
		for _, pl := range part.Plans {
			parts[pl] = append(parts[pl], part.Name)
		}
	}
	var rows []TargetRow
	for _, pl := range p.Plans {
		t := pl.Target
		opts := t.Options
		rows = append(rows, TargetRow{
			Bundle: key, Cluster: t.Key(), Target: t.TargetName, Customizations: t.Customizations,
			Partitions: parts[pl], Action: action(pl, p.Existing[t.Cluster.Status.Namespace]),
			DeploymentID: t.DeploymentID, Paused: t.Paused, Offline: t.Offline, Options: &opts,
		})
	}
	for _, t := range p.Failed {
		rows = append(rows, TargetRow{Bundle: key, Cluster: t.Key(), Target: t.TargetName, Customizations: t.Customizations, Action: "error (left as is)", Error: t.Err.Error()})
	}
	for _, t := range p.Pending {
		rows = append(rows, TargetRow{Bundle: key, Cluster: t.Key(), Target: t.TargetName, Customizations: t.Customizations, Action: "pending registration (left as is)", Error: t.Err.Error()})
	}
	for _, bd := range p.Orphans {
		rows = append(rows, TargetRow{Bundle: key, Cluster: bd.Labels[fleet.ClusterNamespaceLabel] + "/" + bd.Labels[fleet.ClusterLabel], Action: "delete"})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Cluster < rows[j].Cluster })
	return rows
}

// action says what a reconcile would do to one deployment.
func action(pl *target.Plan, existing *fleet.BundleDeployment) string {
	bd := pl.Deployment
	switch {
	case bd == nil:
		return "create later (maxNew)"
	case pl.Create && bd.Spec.DeploymentID == pl.Target.DeploymentID:
		return "create"
	case pl.Create:
		return "create (staged, held by rollout)"
	case existing.Spec.DeploymentID == pl.Target.DeploymentID:
		return "unchanged"
	case bd.Spec.DeploymentID == pl.Target.DeploymentID:
		return "update"
	case pl.Target.Paused:
		return "stage (paused)"
	}
	return "stage (held by rollout)"
}

func printTargetTable(w io.Writer, rows []TargetRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUNDLE\tCLUSTER\tTARGET\tCUSTOMIZATIONS\tPARTITION\tACTION\tNAMESPACE\tSERVICE-ACCOUNT\tDEPLOYMENT-ID")
	for _, r := range rows {
		ns, sa := "", ""
		if r.Options != nil {
			ns = r.Options.TargetNamespace
			if ns == "" {
				ns = r.Options.DefaultNamespace
			}
			sa = r.Options.ServiceAccount
		}
		id := r.DeploymentID
		if r.Error != "" {
			id = "error: " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Bundle, r.Cluster, dash(r.Target), dash(strings.Join(r.Customizations, ",")),
			dash(strings.Join(r.Partitions, ",")), r.Action, dash(ns), dash(sa), id)
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no cluster matches)")
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
