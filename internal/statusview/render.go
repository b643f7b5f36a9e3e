package statusview

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// RenderOptions control how a View is printed.
type RenderOptions struct {
	// Now is the reference time of "last seen" ages.
	Now time.Time
	// Color paints states with ANSI colours (live view on a terminal).
	Color bool
	// MaxMessage truncates problem messages to this many characters;
	// zero means 200.
	MaxMessage int
	// Workspace is the one namespace that was listed, named in the header
	// so that an empty picture says where it looked. Empty: not said.
	Workspace string
	// AllWorkspaces says every namespace was listed (fleet status -A).
	AllWorkspaces bool
	// Elsewhere are other workspaces that hold GitRepos, HelmOps or
	// Clusters, suggested when Workspace shows none.
	Elsewhere []string
}

// Render writes the view as plain text: the clusters, one matrix per
// GitRepo, then the problems.
func Render(w io.Writer, v View, opts RenderOptions) error {
	if opts.MaxMessage == 0 {
		opts.MaxMessage = 200
	}
	p := &printer{w: w, color: opts.Color}
	ready, total := v.Counts()
	scope := ""
	switch {
	case opts.AllWorkspaces:
		scope = "all workspaces: "
	case opts.Workspace != "":
		scope = "workspace " + opts.Workspace + ": "
	}
	p.linef("FLEET  %s%d/%d bundle deployments ready, %d clusters", scope, ready, total, len(v.Clusters))
	p.linef("")
	if opts.Workspace != "" && !opts.AllWorkspaces && len(v.Clusters) == 0 && len(v.Groups) == 0 {
		p.emptyWorkspace(opts.Workspace, opts.Elsewhere)
		return p.err
	}
	if len(v.Clusters) == 0 {
		p.linef("CLUSTERS  none registered")
	} else {
		rows := [][]string{{"CLUSTER", "LABELS", "STATE", "BUNDLES", "LAST SEEN"}}
		for _, c := range v.Clusters {
			rows = append(rows, []string{join(c.Namespace, c.Name), orDash(c.Labels), c.State, orDash(c.Bundles), age(c.LastSeen, opts.Now)})
		}
		p.table(rows, map[int]bool{2: true})
	}
	for _, g := range v.Groups {
		p.linef("")
		head := g.Title
		if g.Commit != "" {
			head += "  commit " + g.Commit
		}
		if g.Version != "" {
			head += "  version " + g.Version
		}
		if g.State != "" {
			head += "  " + p.paint(g.State)
		}
		p.linef("%s", head)
		if len(g.Rows) == 0 {
			p.linef("  no bundles yet")
			continue
		}
		rows := [][]string{append([]string{"BUNDLE"}, g.Columns...)}
		states := map[int]bool{}
		for i := range g.Columns {
			states[i+1] = true
		}
		for _, r := range g.Rows {
			rows = append(rows, append([]string{r.Name}, r.Cells...))
		}
		p.table(rows, states)
	}
	p.linef("")
	if len(v.Problems) == 0 {
		p.linef("No problems.")
	} else {
		p.linef("PROBLEMS")
		for _, pr := range v.Problems {
			msg := pr.Message
			if msg == "" {
				msg = "(no message)"
			}
			p.linef("  %s: %s: %s", pr.Object, p.paint(pr.State), truncate(oneLine(msg), opts.MaxMessage))
		}
	}
	return p.err
}

// emptyWorkspace replaces "no clusters, no problems" for a workspace that
// holds nothing, which is more often the wrong workspace than an empty
// fleet: it names the workspaces that hold something.
func (p *printer) emptyWorkspace(ws string, elsewhere []string) {
	p.linef("Workspace %s has no Clusters, GitRepos or HelmOps.", ws)
	if len(elsewhere) == 0 {
		p.linef("Pick another workspace with -n <namespace>, or all of them with -A.")
		return
	}
	p.linef("These workspaces have some: %s", strings.Join(elsewhere, ", "))
	p.linef("Pick one with -n %s, or all of them with -A.", elsewhere[0])
}

type printer struct {
	w     io.Writer
	color bool
	err   error
}

func (p *printer) linef(format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
}

// table prints rows with columns padded to the widest cell; cells of the
// columns in states are coloured. Padding is computed on the plain text so
// that colours do not shift columns.
func (p *printer) table(rows [][]string, states map[int]bool) {
	widths := map[int]int{}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for ri, r := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range r {
			cell := c
			if ri > 0 && states[i] {
				cell = p.paint(c)
			}
			b.WriteString(cell)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		p.linef("%s", b.String())
	}
}

func (p *printer) paint(state string) string {
	if !p.color {
		return state
	}
	code := "33" // yellow: in progress
	switch state {
	case string(fleet.Ready):
		code = "32"
	case string(fleet.ErrApplied), string(fleet.Offline), "Stalled", "Error":
		code = "31"
	case NotTargeted:
		code = "90"
	}
	return "\x1b[" + code + "m" + state + "\x1b[0m"
}

// age renders how long ago t was, coarsely, relative to now.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
