// Package charts embeds Fleet's Helm charts (fleet-crd, fleet, fleet-agent)
// so that the binaries carry them: `fleet install` renders the same charts
// that users install with helm.
package charts

import (
	"embed"
	"io/fs"
)

//go:embed all:fleet-crd all:fleet all:fleet-agent
var files embed.FS

// Names of the embedded charts.
const (
	CRD        = "fleet-crd"
	Controller = "fleet"
	Agent      = "fleet-agent"
)

// FS returns the files of one chart, rooted at the chart directory.
func FS(name string) (fs.FS, error) {
	return fs.Sub(files, name)
}
