package devenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// controlPlane is one embedded cluster: an etcd and a kube-apiserver whose
// data, certificates and service-account key live in dir, so that it comes
// back with everything it had when restarted.
type controlPlane struct {
	name     string
	dir      string
	apiPort  int
	etcdPort int
	peerPort int
	assets   string

	etcd, apiserver *proc
	config          *rest.Config
}

func (c *controlPlane) pki() pki           { return pki{dir: filepath.Join(c.dir, "pki")} }
func (c *controlPlane) kubeconfig() string { return filepath.Join(c.dir, "kubeconfig") }
func (c *controlPlane) url() string        { return fmt.Sprintf("https://127.0.0.1:%d", c.apiPort) }

// start boots etcd then kube-apiserver and waits until the API answers.
func (c *controlPlane) start(ctx context.Context, table *procTable) error {
	if err := c.pki().ensure(); err != nil {
		return fmt.Errorf("%s: certificates: %w", c.name, err)
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", c.peerPort)
	var err error
	c.etcd, err = startProc(procSpec{
		Name: c.name + "-etcd",
		Path: filepath.Join(c.assets, "etcd"),
		Args: []string{
			"--name=" + c.name,
			"--data-dir=" + filepath.Join(c.dir, "etcd"),
			"--listen-client-urls=" + etcdURL,
			"--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=" + c.name + "=" + peerURL,
			"--unsafe-no-fsync=true",
			"--quota-backend-bytes=2147483648",
		},
		LogPath: filepath.Join(c.dir, "etcd.log"),
	})
	if err != nil {
		return err
	}
	if err := table.add(c.etcd.name, c.etcd.cmd.Process.Pid); err != nil {
		return err
	}
	p := c.pki()
	c.apiserver, err = startProc(procSpec{
		Name: c.name + "-apiserver",
		Path: filepath.Join(c.assets, "kube-apiserver"),
		Args: append([]string{
			"--advertise-address=127.0.0.1",
			// Loopback advertise addresses need the endpoint reconciler off;
			// nothing here uses the in-cluster "kubernetes" Service anyway.
			"--endpoint-reconciler-type=none",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(c.apiPort),
			"--etcd-servers=" + etcdURL,
			"--cert-dir=" + filepath.Join(c.dir, "pki"),
			"--tls-cert-file=" + p.servingCert(),
			"--tls-private-key-file=" + p.servingKey(),
			"--client-ca-file=" + p.caCert(),
			"--service-account-issuer=" + c.url() + "/",
			"--service-account-key-file=" + p.saKey(),
			"--service-account-signing-key-file=" + p.saKey(),
			"--service-cluster-ip-range=10.0.0.0/24",
			"--allow-privileged=true",
			// No controller-manager runs, so nothing would create the
			// default ServiceAccount that this plugin insists on.
			"--disable-admission-plugins=ServiceAccount",
			"--authorization-mode=RBAC",
			// The aggregation layer, for the manager's content API.
		}, p.frontProxyArgs()...),
		LogPath: filepath.Join(c.dir, "apiserver.log"),
	})
	if err != nil {
		return err
	}
	if err := table.add(c.apiserver.name, c.apiserver.cmd.Process.Pid); err != nil {
		return err
	}
	c.config = &rest.Config{
		Host: c.url(),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: p.caCert(), CertFile: p.adminCert(), KeyFile: p.adminKey(),
		},
		QPS: 100, Burst: 200,
	}
	if err := rest.LoadTLSFiles(c.config); err != nil {
		return err
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

// waitReady polls /readyz until the API server and its storage answer, and
// fails early with the log when a process dies.
func (c *controlPlane) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for _, p := range []*proc{c.etcd, c.apiserver} {
			if p.exited() {
				return p.failure()
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		if err == nil {
			_, err = cs.CoreV1().Namespaces().Get(rctx, "kube-system", metav1.GetOptions{})
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become ready within 3 minutes (last error: %v); see %s", c.name, err, c.apiserver.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// writeKubeconfig writes an admin kubeconfig with the certificates inlined
// (a manager reading it hands the CA data on to agents).
func (c *controlPlane) writeKubeconfig() error {
	b, err := c.embeddedKubeconfig()
	if err != nil {
		return err
	}
	return os.WriteFile(c.kubeconfig(), b, 0o600)
}

// embeddedKubeconfig is an admin kubeconfig with the certificates inlined;
// it is also the manager-initiated registration's kubeconfig Secret.
func (c *controlPlane) embeddedKubeconfig() ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.name] = &clientcmdapi.Cluster{Server: c.url(), CertificateAuthorityData: c.config.CAData}
	kc.AuthInfos[c.name+"-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.config.CertData, ClientKeyData: c.config.KeyData}
	kc.Contexts[c.name] = &clientcmdapi.Context{Cluster: c.name, AuthInfo: c.name + "-admin"}
	kc.CurrentContext = c.name
	return clientcmd.Write(*kc)
}

// stop stops the API server before etcd.
func (c *controlPlane) stop(table *procTable) {
	for _, p := range []*proc{c.apiserver, c.etcd} {
		if p != nil {
			p.stop(20 * time.Second)
			table.remove(p.name)
		}
	}
}

func ensureDir(d string) error { return os.MkdirAll(d, 0o755) }
