package fleettest

import (
	"os"
	"path/filepath"
	"testing"
)

// ValuesFleetYAML is the helm part of a fleet.yaml whose values hold
// secrets: s3cret and replicas 2 at the root, apiKey k3y through valuesFiles
// (ValuesFile, extra.yaml), pr0d-s3cret for clusters labelled env=prod, and
// no values of its own for env=dev (the last line, so that a test can add
// to that customization). Tests of where fleet apply stores values and of
// how the manager deploys them use it to check that none of these strings
// shows anywhere but in the values Secrets.
const ValuesFleetYAML = `helm:
  values:
    password: s3cret
    replicas: 2
  valuesFiles:
  - extra.yaml
targetCustomizations:
- name: prod
  clusterSelector:
    matchLabels:
      env: prod
  helm:
    values:
      password: pr0d-s3cret
- name: dev
  clusterSelector:
    matchLabels:
      env: dev
`

// ValuesFile is extra.yaml, the values file ValuesFleetYAML names.
const ValuesFile = "apiKey: k3y\n"

// WriteValuesBundle writes a bundle directory into dir: fleetYAML as
// fleet.yaml, ValuesFile as extra.yaml and a ConfigMap manifest.
func WriteValuesBundle(t testing.TB, dir, fleetYAML string) {
	t.Helper()
	for name, content := range map[string]string{
		"fleet.yaml": fleetYAML,
		"extra.yaml": ValuesFile,
		"cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: b\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
