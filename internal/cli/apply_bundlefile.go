package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/bundlereader"
)

// The most -f - and -b - read from stdin. Beyond them the command fails
// before writing anything: a stream cut at the limit could end in a
// truncated document that still parses, and would replace what is deployed.
// Variables so that a test can exceed them without piping 64 MiB.
var (
	maxFleetYAMLStdin  int64 = 10 << 20
	maxBundleFileStdin int64 = 64 << 20
)

// readStdin reads all of r, or fails when it holds more than limit bytes.
func readStdin(r io.Reader, limit int64) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("stdin is larger than %s: nothing was written", sizeString(limit))
	}
	return b, nil
}

// sizeString is n in MiB when it is a whole number of them, else in bytes.
func sizeString(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// readBundleFile is -b: the Bundles of the file as written (strictly
// decoded, so that a misspelt field is an error rather than lost), moved
// to namespace and given labels. The flags that shape bundles read from
// PATHs do not apply; those given are warned about.
func (f *ApplyFlags) readBundleFile(stdin io.Reader, namespace string, labels map[string]string, stderr io.Writer) ([]*fleet.Bundle, error) {
	for _, ignored := range []struct {
		flag string
		set  bool
	}{
		{"--targets-file", f.TargetsFile != ""}, {"-c/--compress", f.Compress}, {"-a/--service-account", f.ServiceAccount != ""},
		{"--sync-generation", f.SyncGeneration != 0}, {"--target-namespace", f.TargetNamespace != ""}, {"--paused", f.Paused},
		{"--keep-resources", f.KeepResources}, {"--delete-namespace", f.DeleteNamespace},
		{"--correct-drift", f.CorrectDrift || f.CorrectForce || f.CorrectKeepFail}, {"--max-bundle-size", f.MaxBundleSize != 0},
		{"--max-chart-downloads", f.MaxChartDownloads != 0 && f.MaxChartDownloads != bundlereader.DefaultLimits.MaxChartDownloads},
	} {
		if ignored.set {
			fmt.Fprintf(stderr, "warning: %s is ignored with -b: the Bundles of the file are written as they are\n", ignored.flag)
		}
	}
	var data []byte
	var err error
	if f.BundleFile == "-" {
		data, err = readStdin(stdin, maxBundleFileStdin)
	} else {
		data, err = os.ReadFile(f.BundleFile)
	}
	if err != nil {
		return nil, fmt.Errorf("-b: %w", err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*fleet.Bundle
	seen := map[string]bool{}
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("-b %s: %w", f.BundleFile, err)
		}
		generic := map[string]any{}
		if err := yaml.Unmarshal(raw, &generic); err != nil {
			return nil, fmt.Errorf("-b %s: document %d: %w", f.BundleFile, doc, err)
		}
		if len(generic) == 0 {
			continue // empty document
		}
		b := &fleet.Bundle{}
		if err := yaml.UnmarshalStrict(raw, b); err != nil {
			return nil, fmt.Errorf("-b %s: document %d: %w", f.BundleFile, doc, err)
		}
		if b.APIVersion != fleet.GroupVersion.String() || b.Kind != "Bundle" {
			return nil, fmt.Errorf("-b %s: document %d is %s %s, not a %s Bundle", f.BundleFile, doc, b.APIVersion, b.Kind, fleet.GroupVersion)
		}
		if b.Name == "" {
			return nil, fmt.Errorf("-b %s: document %d: the Bundle has no metadata.name", f.BundleFile, doc)
		}
		if seen[b.Name] {
			return nil, fmt.Errorf("-b %s: Bundle %s appears twice", f.BundleFile, b.Name)
		}
		seen[b.Name] = true
		if b.Namespace != "" && b.Namespace != namespace {
			fmt.Fprintf(stderr, "warning: -b %s: Bundle %s is written to namespace %s (-n), not %s\n", f.BundleFile, b.Name, namespace, b.Namespace)
		}
		// Only what a user writes: server-set metadata (uid,
		// resourceVersion, managedFields ...) and the status are dropped.
		meta := metav1.ObjectMeta{Name: b.Name, Namespace: namespace, Labels: b.Labels, Annotations: b.Annotations}
		if len(labels) > 0 && meta.Labels == nil {
			meta.Labels = map[string]string{}
		}
		maps.Copy(meta.Labels, labels)
		out = append(out, &fleet.Bundle{TypeMeta: b.TypeMeta, ObjectMeta: meta, Spec: b.Spec})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-b %s: no Bundle found", f.BundleFile)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
