package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/apply"
	"github.com/fleetgo/fleet/internal/bundlereader"
)

func init() { register(newApplyCmd) }

// ApplyFlags are the flags of `fleet apply`, kept in a struct so tests and
// the GitOps job can run the same code without cobra.
type ApplyFlags struct {
	Output          string
	FleetFile       string
	Labels          map[string]string
	TargetsFile     string
	Compress        bool
	ServiceAccount  string
	SyncGeneration  int64
	TargetNamespace string
	Paused          bool
	Commit          string
	KeepResources   bool
	DeleteNamespace bool
	CorrectDrift    bool
	CorrectForce    bool
	CorrectKeepFail bool

	Username            string
	PasswordFile        string
	CACertsFile         string
	HelmRepoURLRegex    string
	HelmCredsByPathFile string
	HelmBasicHTTP       bool
	HelmInsecureSkipTLS bool
	MaxBundleSize       int64
	// MaxChartDownloads (--max-chart-downloads) caps the charts one bundle
	// fetches over the network; 0 means bundlereader.DefaultLimits'.
	MaxChartDownloads int
	// SSHPrivateKeyFile holds the PEM key for git:: chart sources over
	// SSH; their host keys are checked against env FLEET_KNOWN_HOSTS (or
	// SSH_KNOWN_HOSTS).
	SSHPrivateKeyFile string

	// DrivenScan reads each PATH as one bundle directory, optionally
	// followed by DrivenScanSep and an options file (Fleet's driven scan).
	DrivenScan    bool
	DrivenScanSep string

	// OCIRegistrySecret is accepted so that Fleet's invocations work; OCI
	// storage of contents is not implemented, so it only warns.
	OCIRegistrySecret string
	// ImageScanEnabled is accepted for the same reason: image scans are
	// not implemented.
	ImageScanEnabled bool

	// BundleFile (-b) is a file of raw Bundle resources ("-" for stdin)
	// written instead of bundles read from PATHs.
	BundleFile string
	// MaxConcurrency (--bundle-creation-max-concurrency) is how many
	// bundles are written at once; 0 means apply.DefaultParallel.
	MaxConcurrency int
}

// maxConcurrencyEnv is Fleet's environment variable for
// --bundle-creation-max-concurrency.
const maxConcurrencyEnv = "FLEET_BUNDLE_CREATION_MAX_CONCURRENCY"

// fleetKnownHostsEnv holds the known_hosts lines that git:: chart sources
// over SSH are verified against: Rancher Fleet's GitOps job hands them to
// `fleet apply` in this variable. knownHostsEnv is read when it is empty,
// as earlier versions of this CLI did. Without either such a source is
// refused rather than trusted on first use.
const (
	fleetKnownHostsEnv = "FLEET_KNOWN_HOSTS"
	knownHostsEnv      = "SSH_KNOWN_HOSTS"
)

// knownHosts is the content of FLEET_KNOWN_HOSTS, else of SSH_KNOWN_HOSTS.
func knownHosts() []byte {
	if kh := os.Getenv(fleetKnownHostsEnv); kh != "" {
		return []byte(kh)
	}
	return []byte(os.Getenv(knownHostsEnv))
}

func newApplyCmd(g *Globals) *cobra.Command {
	f := &ApplyFlags{}
	cmd := &cobra.Command{
		Use:   "apply NAME [PATH...]",
		Short: "Build bundles from directories and create or update them",
		Long: `apply builds one Bundle for every directory with a fleet.yaml (and for PATH itself when it holds
manifests), named NAME-<path>, and creates or updates them in the namespace given by -n.
With -o - the bundles are printed as YAML instead. Bundles labelled with the same
fleet.cattle.io/repo-name that are no longer produced are deleted.

With --driven-scan nothing is discovered: each PATH is one bundle directory, written
DIR or DIR:OPTIONS where OPTIONS is a fleet.yaml-like file relative to DIR (fleet.yaml
when omitted; it may lie outside DIR but not outside the current directory), and the
bundle is named from NAME/DIR/OPTIONS-without-extension joined and cleaned
(app:../shared/dev.yaml gives NAME-shared-dev). A bundle holds every file under DIR,
sub-directories with a fleet.yaml of their own included (no fleet.yaml itself, nor the
options files named); a DIR without resources is skipped with a warning.

With -b FILE nothing is read from PATHs: FILE holds fleet.cattle.io/v1alpha1 Bundle
resources (YAML or JSON, several documents allowed, "-" for stdin), such as the output
of -o, which are written as they are, into the namespace given by -n, with the labels
of -l and --commit added. Nothing is pruned.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if v := os.Getenv(maxConcurrencyEnv); v != "" && !cmd.Flags().Changed("bundle-creation-max-concurrency") {
				n, err := strconv.Atoi(v)
				if err != nil {
					return fmt.Errorf("%s=%q: not a number", maxConcurrencyEnv, v)
				}
				f.MaxConcurrency = n
			}
			return RunApply(cmd.Context(), g, f, args[0], args[1:], cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.Output, "output", "o", "", "write the bundles as YAML to this file ('-' for stdout) instead of applying them")
	fl.StringVarP(&f.FleetFile, "file", "f", "", "fleet.yaml to use for the single PATH, in place of PATH/fleet.yaml ('-' reads it from stdin, at most 10 MiB; refused with several PATHs)")
	fl.StringToStringVarP(&f.Labels, "label", "l", nil, "labels to add to every bundle (key=value)")
	fl.StringVar(&f.TargetsFile, "targets-file", "", "YAML file with targets and targetRestrictions to append")
	fl.BoolVarP(&f.Compress, "compress", "c", false, "always store resources base64+gz")
	fl.StringVarP(&f.ServiceAccount, "service-account", "a", "", "service account the agent deploys with")
	fl.Int64Var(&f.SyncGeneration, "sync-generation", 0, "force a redeploy when this number changes")
	fl.StringVar(&f.TargetNamespace, "target-namespace", "", "force every resource into this namespace")
	fl.BoolVar(&f.Paused, "paused", false, "create the bundles paused")
	fl.StringVar(&f.Commit, "commit", os.Getenv("COMMIT"), "commit the bundles are built from (env COMMIT)")
	fl.BoolVar(&f.KeepResources, "keep-resources", false, "keep deployed resources when a bundle is deleted")
	fl.BoolVar(&f.DeleteNamespace, "delete-namespace", false, "delete the target namespace with the bundle")
	fl.BoolVar(&f.CorrectDrift, "correct-drift", false, "correct drift of deployed resources")
	fl.BoolVar(&f.CorrectForce, "correct-drift-force", false, "correct drift by recreating resources when needed")
	fl.BoolVar(&f.CorrectKeepFail, "correct-drift-keep-fail-history", false, "keep failed drift corrections in the Helm history")
	fl.StringVar(&f.Username, "username", os.Getenv("HELM_USERNAME"), "Helm repository username (env HELM_USERNAME)")
	fl.StringVar(&f.PasswordFile, "password-file", "", "file holding the Helm repository password")
	fl.StringVar(&f.CACertsFile, "cacerts-file", "", "PEM CA bundle for Helm repositories")
	fl.StringVar(&f.HelmRepoURLRegex, "helm-repo-url-regex", "", "send Helm credentials only to repository URLs matching this regex")
	fl.StringVar(&f.HelmCredsByPathFile, "helm-credentials-by-path-file", "", "YAML map of bundle path to Helm credentials; a key may be a glob (apps/*: * stays within one directory), the exact path wins, then the first matching glob in lexical order")
	fl.BoolVar(&f.HelmBasicHTTP, "helm-basic-http", false, "use plain HTTP for OCI registries")
	fl.BoolVar(&f.HelmInsecureSkipTLS, "helm-insecure-skip-tls", false, "do not verify Helm repositories' TLS certificates")
	fl.Int64Var(&f.MaxBundleSize, "max-bundle-size", 0, "largest serialized bundle in bytes (default and 0: 3 MiB; negative is refused)")
	fl.IntVar(&f.MaxChartDownloads, "max-chart-downloads", bundlereader.DefaultLimits.MaxChartDownloads,
		"most charts one bundle may fetch over the network: helm.chart sources, customizations' charts and dependencies missing from charts/")
	fl.BoolVar(&f.DrivenScan, "driven-scan", false, "each PATH is one bundle directory, DIR[:OPTIONS-FILE], instead of a tree to scan")
	fl.StringVar(&f.DrivenScanSep, "driven-scan-sep", ":", "separator between a --driven-scan directory and its options file")
	fl.StringVar(&f.OCIRegistrySecret, "oci-registry-secret", "", "accepted for compatibility with Fleet and ignored (with a warning): contents are stored as Content resources")
	fl.StringVar(&f.SSHPrivateKeyFile, "ssh-privatekey-file", "", "PEM private key for git:: chart sources over SSH (host keys checked against the known_hosts lines of env "+
		fleetKnownHostsEnv+", else "+knownHostsEnv+")")
	fl.BoolVar(&f.ImageScanEnabled, "imagescan-enabled", false, "accepted for compatibility with Fleet and ignored (with a warning): image scans are not implemented")
	fl.StringVarP(&f.BundleFile, "bundle-file", "b", "", "write the Bundle resources of this file ('-' for stdin, at most 64 MiB) instead of reading PATHs")
	fl.IntVar(&f.MaxConcurrency, "bundle-creation-max-concurrency", 0, "how many bundles are written at once (env "+maxConcurrencyEnv+"; 0 means "+strconv.Itoa(apply.DefaultParallel)+")")
	return cmd
}

// helmCreds is one entry of --helm-credentials-by-path-file (Fleet's key
// names; caBundle and sshPrivateKey may be PEM or base64 of PEM, the
// latter being how Fleet's secrets-path.yaml holds them).
type helmCreds struct {
	Username           string `json:"username,omitempty"`
	Password           string `json:"password,omitempty"`
	CABundle           string `json:"caBundle,omitempty"`
	SSHPrivateKey      string `json:"sshPrivateKey,omitempty"` // PEM or base64 of PEM, for git:: charts over SSH
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
	InsecureSkipTLS    bool   `json:"insecureSkipTls,omitempty"`
	BasicHTTP          bool   `json:"basicHTTP,omitempty"`
}

func (c helmCreds) caBundle() []byte { return pemOrBase64(c.CABundle) }

// pemOrBase64 is s as PEM: s itself when it holds PEM (or is not base64),
// else s base64-decoded. Fleet takes CA bundles either way.
func pemOrBase64(s string) []byte {
	if s == "" || strings.Contains(s, "-----BEGIN") {
		return []byte(s)
	}
	if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s)); err == nil {
		return b
	}
	return []byte(s)
}

// targetsFile is the content of --targets-file.
type targetsFile struct {
	Targets            []fleet.BundleTarget            `json:"targets,omitempty"`
	TargetRestrictions []fleet.BundleTargetRestriction `json:"targetRestrictions,omitempty"`
}

// ReadOptions turns the flags into bundle reader options.
func (f *ApplyFlags) ReadOptions(namespace string, stdin io.Reader, stderr io.Writer) (bundlereader.Options, error) {
	o := bundlereader.Options{
		Namespace:        namespace,
		Labels:           map[string]string{},
		ServiceAccount:   f.ServiceAccount,
		TargetNamespace:  f.TargetNamespace,
		Paused:           f.Paused,
		KeepResources:    f.KeepResources,
		DeleteNamespace:  f.DeleteNamespace,
		SyncGeneration:   f.SyncGeneration,
		HelmRepoURLRegex: f.HelmRepoURLRegex,
		Limits:           bundlereader.Limits{MaxBundleSize: f.MaxBundleSize, MaxChartDownloads: f.MaxChartDownloads},
		Warn:             func(msg string) { fmt.Fprintln(stderr, "warning:", msg) },
	}
	for k, v := range f.Labels {
		o.Labels[k] = v
	}
	if f.Commit != "" {
		o.Labels[fleet.CommitLabel] = f.Commit
	}
	if f.Compress {
		o.Limits.CompressThreshold = 1
	}
	if f.CorrectDrift || f.CorrectForce || f.CorrectKeepFail {
		o.CorrectDrift = &fleet.CorrectDrift{Enabled: true, Force: f.CorrectForce, KeepFailHistory: f.CorrectKeepFail}
	}
	o.Auth = bundlereader.HelmAuth{Username: f.Username, InsecureSkipTLS: f.HelmInsecureSkipTLS, BasicHTTP: f.HelmBasicHTTP,
		SSHKnownHosts: knownHosts()}
	if f.SSHPrivateKeyFile != "" {
		// The error names the file only: never its content.
		b, err := os.ReadFile(f.SSHPrivateKeyFile)
		if err != nil {
			return o, fmt.Errorf("--ssh-privatekey-file: %w", err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return o, fmt.Errorf("--ssh-privatekey-file %s is empty", f.SSHPrivateKeyFile)
		}
		o.Auth.SSHPrivateKey = b
	}
	if f.PasswordFile != "" {
		b, err := os.ReadFile(f.PasswordFile)
		if err != nil {
			return o, fmt.Errorf("--password-file: %w", err)
		}
		o.Auth.Password = strings.TrimRight(string(b), "\r\n")
	}
	if f.CACertsFile != "" {
		b, err := os.ReadFile(f.CACertsFile)
		if err != nil {
			return o, fmt.Errorf("--cacerts-file: %w", err)
		}
		o.Auth.CABundle = b
	}
	if f.HelmCredsByPathFile != "" {
		b, err := os.ReadFile(f.HelmCredsByPathFile)
		if err != nil {
			return o, fmt.Errorf("--helm-credentials-by-path-file: %w", err)
		}
		byPath := map[string]helmCreds{}
		if err := yaml.UnmarshalStrict(b, &byPath); err != nil {
			return o, fmt.Errorf("--helm-credentials-by-path-file: %w", err)
		}
		o.AuthByPath = map[string]bundlereader.HelmAuth{}
		for p, c := range byPath {
			o.AuthByPath[path.Clean(strings.TrimPrefix(p, "./"))] = bundlereader.HelmAuth{Username: c.Username, Password: c.Password,
				CABundle: c.caBundle(), InsecureSkipTLS: c.InsecureSkipTLS || c.InsecureSkipVerify, BasicHTTP: c.BasicHTTP,
				SSHPrivateKey: pemOrBase64(c.SSHPrivateKey)}
		}
	}
	if f.TargetsFile != "" {
		b, err := os.ReadFile(f.TargetsFile)
		if err != nil {
			return o, fmt.Errorf("--targets-file: %w", err)
		}
		tf := targetsFile{}
		if err := yaml.UnmarshalStrict(b, &tf); err != nil {
			return o, fmt.Errorf("--targets-file %s: %w", f.TargetsFile, err)
		}
		o.Targets, o.TargetRestrictions = tf.Targets, tf.TargetRestrictions
	}
	switch f.FleetFile {
	case "":
	case "-":
		b, err := readStdin(stdin, maxFleetYAMLStdin)
		if err != nil {
			return o, fmt.Errorf("-f -: reading fleet.yaml from stdin: %w", err)
		}
		o.FleetYAML = b
	default:
		b, err := os.ReadFile(f.FleetFile)
		if err != nil {
			return o, fmt.Errorf("-f: %w", err)
		}
		o.FleetYAML = b
	}
	if o.FleetYAML == nil && f.FleetFile != "" {
		o.FleetYAML = []byte{}
	}
	return o, nil
}

// RunApply is `fleet apply`: build every bundle first (any error aborts
// before anything is written), then print or apply them.
func RunApply(ctx context.Context, g *Globals, f *ApplyFlags, name string, paths []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("NAME must not be empty: it is the prefix of every bundle name")
	}
	if f.MaxConcurrency < 0 {
		return fmt.Errorf("--bundle-creation-max-concurrency must not be negative, got %d", f.MaxConcurrency)
	}
	if f.MaxChartDownloads < 0 {
		return fmt.Errorf("--max-chart-downloads must not be negative, got %d", f.MaxChartDownloads)
	}
	if f.MaxBundleSize < 0 {
		return fmt.Errorf("--max-bundle-size must not be negative, got %d (0 means the default, 3 MiB)", f.MaxBundleSize)
	}
	if f.BundleFile != "" {
		switch {
		case len(paths) > 0:
			return fmt.Errorf("-b writes the Bundles of a file and reads no PATH, got %q", paths)
		case f.FleetFile != "":
			return fmt.Errorf("-b and -f exclude each other")
		case f.DrivenScan:
			return fmt.Errorf("-b and --driven-scan exclude each other")
		}
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	if f.FleetFile != "" && len(paths) > 1 {
		return fmt.Errorf("-f applies to a single PATH, got %d", len(paths))
	}
	if f.FleetFile != "" && f.DrivenScan {
		return fmt.Errorf("-f and --driven-scan exclude each other: name the options file as DIR%sFILE", f.DrivenScanSep)
	}
	opts, err := f.ReadOptions(g.Namespace, stdin, stderr)
	if err != nil {
		return err
	}
	if f.OCIRegistrySecret != "" {
		fmt.Fprintln(stderr, "warning: --oci-registry-secret is ignored: bundle contents are stored as Content resources")
	}
	if f.ImageScanEnabled {
		fmt.Fprintln(stderr, "warning: --imagescan-enabled is ignored: image scans are not implemented")
	}
	log := logr.FromContextOrDiscard(ctx)
	var bundles []*fleet.Bundle
	switch {
	case f.BundleFile != "":
		bundles, err = f.readBundleFile(stdin, g.Namespace, opts.Labels, stderr)
	case f.DrivenScan:
		bundles, err = ReadDriven(ctx, name, paths, f.DrivenScanSep, opts)
	default:
		bundles, err = ReadPaths(ctx, name, paths, opts)
	}
	if err != nil {
		return err
	}
	for _, b := range bundles {
		log.V(1).Info("bundle built", "namespace", b.Namespace, "name", b.Name, "resources", len(b.Spec.Resources))
	}
	if f.Output != "" {
		out, err := BundlesYAML(bundles)
		if err != nil {
			return err
		}
		if f.Output == "-" {
			_, err = stdout.Write(out)
			return err
		}
		return os.WriteFile(f.Output, out, 0o644)
	}
	c, err := g.Client()
	if err != nil {
		return err
	}
	return ApplyBundlesWith(ctx, c, f.applyOptions(g.Namespace, opts.Labels), bundles, stdout)
}

// applyOptions are the options of writing the bundles: --bundle-creation-
// max-concurrency, and pruning by the repo-name label (never with -b: a
// file of bundles is not the whole of a repository).
func (f *ApplyFlags) applyOptions(namespace string, labels map[string]string) apply.Options {
	opts := apply.Options{Namespace: namespace, Parallel: f.MaxConcurrency}
	if repo := labels[fleet.RepoLabel]; repo != "" && f.BundleFile == "" {
		opts.PruneSelector = map[string]string{fleet.RepoLabel: repo}
	}
	return opts
}

// ReadPaths reads paths relative to the working directory as one
// repository; a path outside it is read as a repository of its own.
func ReadPaths(ctx context.Context, name string, paths []string, opts bundlereader.Options) ([]*fleet.Bundle, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	var inside []string
	var all []*fleet.Bundle
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(cwd, abs)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			inside = append(inside, filepath.ToSlash(rel))
			continue
		}
		bs, err := bundlereader.Read(ctx, path.Join(name, strings.TrimLeft(filepath.ToSlash(p), "./")), abs, nil, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, bs...)
	}
	if len(inside) > 0 {
		bs, err := bundlereader.Read(ctx, name, cwd, inside, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, bs...)
	}
	return all, nil
}

// ReadDriven reads each of paths, DIR or DIR<sep>OPTIONS relative to the
// working directory, as one bundle (bundlereader.ReadDriven).
func ReadDriven(ctx context.Context, name string, paths []string, sep string, opts bundlereader.Options) ([]*fleet.Bundle, error) {
	if sep == "" {
		return nil, fmt.Errorf("--driven-scan-sep must not be empty")
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	entries := make([]fleet.BundlePath, 0, len(paths))
	for _, p := range paths {
		parts := strings.Split(p, sep)
		if len(parts) > 2 {
			return nil, fmt.Errorf("driven scan path %q: more than one %q; set another --driven-scan-sep", p, sep)
		}
		abs, err := filepath.Abs(parts[0])
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(cwd, abs)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, fmt.Errorf("driven scan path %q is outside the working directory", parts[0])
		}
		e := fleet.BundlePath{Base: filepath.ToSlash(rel)}
		if len(parts) == 2 {
			e.Options = parts[1]
		}
		entries = append(entries, e)
	}
	return bundlereader.ReadDriven(ctx, name, cwd, entries, opts)
}

// BundlesYAML prints bundles as a YAML stream, in the given (sorted) order.
func BundlesYAML(bundles []*fleet.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	for i, b := range bundles {
		if i > 0 {
			buf.WriteString("---\n")
		}
		// Print what is applied: the status is the manager's, not ours.
		obj := b.DeepCopy()
		obj.Status = fleet.BundleStatus{}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		generic := map[string]interface{}{}
		if err := yaml.Unmarshal(data, &generic); err != nil {
			return nil, err
		}
		delete(generic, "status")
		out, err := yaml.Marshal(generic)
		if err != nil {
			return nil, err
		}
		buf.Write(out)
	}
	return buf.Bytes(), nil
}

// ApplyBundles writes bundles and prunes those of the same repo that are
// gone (only when the repo-name label is set).
func ApplyBundles(ctx context.Context, c client.Client, namespace string, bundles []*fleet.Bundle, labels map[string]string, out io.Writer) error {
	return ApplyBundlesWith(ctx, c, (&ApplyFlags{}).applyOptions(namespace, labels), bundles, out)
}

// ApplyBundlesWith writes bundles with opts and reports each change to out.
func ApplyBundlesWith(ctx context.Context, c client.Client, opts apply.Options, bundles []*fleet.Bundle, out io.Writer) error {
	namespace := opts.Namespace
	res, err := apply.ApplyWithResult(ctx, c, bundles, opts)
	if res != nil {
		for _, n := range res.Created {
			fmt.Fprintf(out, "bundle %s/%s created\n", namespace, n)
		}
		for _, n := range res.Updated {
			fmt.Fprintf(out, "bundle %s/%s updated\n", namespace, n)
		}
		for _, n := range res.Unchanged {
			fmt.Fprintf(out, "bundle %s/%s unchanged\n", namespace, n)
		}
		for _, n := range res.Deleted {
			fmt.Fprintf(out, "bundle %s/%s deleted\n", namespace, n)
		}
	}
	return err
}
