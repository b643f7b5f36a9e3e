// Package testenv starts real, independent Kubernetes control planes
// (kube-apiserver + etcd, built by `make controlplane`) for integration tests.
//
// Every test package that needs a cluster boots its clusters once in TestMain.
// Upstream (manager) and downstream clusters are always separate API servers,
// so a test can prove that the manager never dials a downstream cluster and
// that an agent's credential works nowhere but where it was granted.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fleetscheme "github.com/fleetgo/fleet/internal/scheme"
)

// Scheme knows the core Kubernetes kinds, CRDs and every Fleet kind.
var Scheme = fleetscheme.Scheme

// Options configure a cluster.
type Options struct {
	// Name identifies the cluster in logs and kubeconfig files.
	Name string
	// WithoutCRDs skips installing the Fleet CRDs (downstream clusters
	// normally do not have them).
	WithoutCRDs bool
	// ExtraAPIServerArgs are appended to kube-apiserver's flags, such as
	// "--service-account-max-token-expiration=48h".
	ExtraAPIServerArgs map[string]string
	// WithoutAggregationLayer starts kube-apiserver without the
	// front-proxy (request-header) flags, like an API server whose
	// aggregation layer is not configured.
	WithoutAggregationLayer bool
	// APIServerLog, when set, receives kube-apiserver's standard error
	// (its klog output), e.g. to see watchers it closed.
	APIServerLog io.Writer
}

// Cluster is one running control plane.
type Cluster struct {
	Name string
	// Config is an admin (system:masters) rest config.
	Config *rest.Config
	// Client is an admin controller-runtime client using Scheme.
	Client client.Client
	// Clientset is an admin typed client.
	Clientset *kubernetes.Clientset
	// Kubeconfig is the path of an admin kubeconfig file for this cluster.
	Kubeconfig string

	env  *envtest.Environment
	dir  string
	once sync.Once
	// pkiDir holds the front-proxy CA and client certificate.
	pkiDir string

	// etcdMu guards etcdDataDir: set once etcd has been restarted by
	// StartEtcd, whose data directory envtest then no longer removes.
	etcdMu      sync.Mutex
	etcdDataDir string

	// apiMu guards apiCertDir: the copy of the API server's certificates
	// and keys a server restarted by StartAPIServer uses.
	apiMu      sync.Mutex
	apiCertDir string
}

// RepoRoot returns the module root, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir returns where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS or
// bin/controlplane under the module root.
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin", "controlplane")
}

// CRDDir is where the generated CRDs live.
func CRDDir() string {
	return filepath.Join(RepoRoot(), "charts", "fleet-crd", "templates")
}

// Start boots one control plane and waits until it serves requests.
func Start(opts Options) (*Cluster, error) {
	assets := AssetsDir()
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("testenv: %s not found in %s; run 'make controlplane' (or 'make test') first", b, assets)
		}
	}
	if opts.Name == "" {
		opts.Name = "cluster"
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		ErrorIfCRDPathMissing:    true,
		Scheme:                   Scheme,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if !opts.WithoutCRDs {
		env.CRDDirectoryPaths = []string{CRDDir()}
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	pkiDir, err := os.MkdirTemp("", "fleet-testenv-pki-")
	if err != nil {
		return nil, err
	}
	if !opts.WithoutAggregationLayer {
		fp, err := frontProxyArgs(pkiDir)
		if err != nil {
			_ = os.RemoveAll(pkiDir)
			return nil, err
		}
		for k, v := range fp {
			args.Set(k, v)
		}
	}
	for k, v := range opts.ExtraAPIServerArgs {
		args.Set(k, v)
	}
	if opts.APIServerLog != nil {
		env.ControlPlane.GetAPIServer().Err = opts.APIServerLog
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves the processes running when a later step (such as
		// installing CRDs) fails; stop them so they do not outlive the test.
		_ = env.Stop()
		_ = os.RemoveAll(pkiDir)
		return nil, fmt.Errorf("testenv: starting %s: %w", opts.Name, err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c := &Cluster{Name: opts.Name, Config: cfg, env: env, pkiDir: pkiDir}
	if c.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		_ = env.Stop()
		return nil, err
	}
	if c.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		_ = env.Stop()
		return nil, err
	}
	if c.dir, err = os.MkdirTemp("", "fleet-testenv-"+opts.Name+"-"); err != nil {
		_ = env.Stop()
		return nil, err
	}
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := WriteKubeconfig(c.Kubeconfig, cfg, opts.Name); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if err := c.waitForNamespace("kube-system"); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// StartMany boots n independent clusters in parallel, named prefix-0..n-1.
func StartMany(prefix string, n int, opts Options) ([]*Cluster, error) {
	out := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.Name = fmt.Sprintf("%s-%d", prefix, i)
			out[i], errs[i] = Start(o)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range out {
			if c != nil {
				_ = c.Stop()
			}
		}
		return nil, err
	}
	return out, nil
}

// Stop shuts the control plane down and removes its files. It is safe to
// call more than once.
func (c *Cluster) Stop() error {
	var err error
	c.once.Do(func() {
		err = c.env.Stop()
		if c.dir != "" {
			_ = os.RemoveAll(c.dir)
		}
		_ = os.RemoveAll(c.pkiDir)
		c.etcdMu.Lock()
		if c.etcdDataDir != "" {
			_ = os.RemoveAll(c.etcdDataDir)
		}
		c.etcdMu.Unlock()
		c.apiMu.Lock()
		if c.apiCertDir != "" {
			_ = os.RemoveAll(c.apiCertDir)
		}
		c.apiMu.Unlock()
	})
	return err
}

// Env exposes the underlying envtest environment, for tests that stop and
// restart the API server.
func (c *Cluster) Env() *envtest.Environment { return c.env }

// KubeSystemUID returns the UID of the kube-system namespace, the default
// identity of a cluster.
func (c *Cluster) KubeSystemUID(ctx context.Context) (string, error) {
	ns := &corev1.Namespace{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, ns); err != nil {
		return "", err
	}
	return string(ns.UID), nil
}

func (c *Cluster) waitForNamespace(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		ns := &corev1.Namespace{}
		err := c.Client.Get(ctx, client.ObjectKey{Name: name}, ns)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: namespace %s never appeared in %s: %w", name, c.Name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WriteKubeconfig writes a kubeconfig file for cfg (certificate or token
// auth) with one context named name.
func WriteKubeconfig(path string, cfg *rest.Config, name string) error {
	kc := KubeconfigFor(cfg, name)
	return clientcmd.WriteToFile(*kc, path)
}

// KubeconfigFor builds an in-memory kubeconfig for cfg.
func KubeconfigFor(cfg *rest.Config, name string) *clientcmdapi.Config {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return kc
}

// StartPair boots the usual pair of an end-to-end test: an upstream (manager)
// cluster with the Fleet CRDs and a separate downstream cluster without them,
// named <prefix>-upstream and <prefix>-downstream. On error nothing is left
// running.
func StartPair(prefix string) (upstream, downstream *Cluster, err error) {
	if upstream, err = Start(Options{Name: prefix + "-upstream"}); err != nil {
		return nil, nil, err
	}
	if downstream, err = Start(Options{Name: prefix + "-downstream", WithoutCRDs: true}); err != nil {
		_ = upstream.Stop()
		return nil, nil, err
	}
	return upstream, downstream, nil
}
