package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/contentapi"
	"github.com/fleetgo/fleet/internal/pki"
)

// Options configure the content API of one manager replica.
type Options struct {
	// Addr is where the server listens, such as ":8443". Empty or "0"
	// disables the content API; the manager then lets agents read
	// Contents directly through a ClusterRole and ClusterRoleBinding per
	// cluster instead (the slower way, for API servers without an
	// aggregation layer).
	Addr string
	// Namespace and Service name the Service the APIService routes to
	// (default: the system namespace, "fleet-content-api"); Port is the
	// Service's port (default 443).
	Namespace string
	Service   string
	Port      int32
	// ExternalName, when set, makes the manager write the Service itself,
	// as an ExternalName Service for this host, and point the APIService
	// at the port it actually listens on. It is for API servers that
	// cannot reach a pod network: the embedded control planes of tests
	// and `fleet dev`, where the manager is a local process.
	ExternalName string
	// Published is what this process's bundle reconciler wrote moments
	// ago; with it, a Content read for a deployment the cache has not seen
	// yet needs no GET of that deployment (nil: always GET).
	Published *contentapi.Published
	// Credentials, when set, also serves registering agents their
	// credential (registrationcredentials), and takes agents' check-ins
	// (clusterstatuses), which it writes on their Clusters.
	Credentials contentapi.Credentials
	// FirstCheckIn, when set, sets on a Cluster whose agent checks in for
	// the first time the status the Cluster controller would write for it
	// (clusterstatus.FirstCheckIn), so that the check-in and its Ready
	// condition are one write. Only for the replica that runs that
	// controller.
	FirstCheckIn func(context.Context, *fleet.Cluster) error
	// Elected, when set, holds FirstCheckIn back until it is closed (the
	// manager's Elected): only the leader runs the Cluster controller and
	// so has the Clusters cached. On a standby replica the cache read of
	// the Cluster would start an informer of every Cluster, for one write
	// saved per cluster; its check-ins take the plain patch instead.
	Elected <-chan struct{}
}

// Enabled reports whether the content API is on.
func (o Options) Enabled() bool { return o.Addr != "" && o.Addr != "0" }

func (o *Options) defaults(systemNamespace string) {
	if o.Namespace == "" {
		o.Namespace = systemNamespace
	}
	if o.Service == "" {
		o.Service = "fleet-content-api"
	}
	if o.Port == 0 {
		o.Port = 443
	}
}

// Setup adds the server (on every replica: it only reads) and, when
// register is true, the leader-elected writer of the Service and APIService.
// It returns the server's readiness check, for the manager's /readyz (the
// pod's readiness probe): a replica that cannot authenticate the
// aggregation layer answers every request 503, so it must not be counted
// among the content API Service's endpoints.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options, systemNamespace string, register bool) (healthz.Checker, error) {
	opts.defaults(systemNamespace)
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("content API: %w", err)
	}
	h := &handler{cache: mgr.GetClient(), live: mgr.GetAPIReader(), published: opts.Published, credentials: opts.Credentials}
	if opts.Credentials != nil {
		// The agent features go together: a manager that may grant the
		// credential watch may also grant check-ins (see
		// registration.MayHandOverCredentials).
		h.statuses = mgr.GetClient()
		h.firstCheckIn = opts.FirstCheckIn
		h.elected = opts.Elected
	}
	s := &server{opts: opts, ln: ln, live: mgr.GetAPIReader(), writer: mgr.GetClient(), ready: make(chan struct{}), h: h}
	if err := mgr.Add(s); err != nil {
		return nil, err
	}
	if register {
		if err := mgr.Add(&registrar{s: s}); err != nil {
			return nil, err
		}
	}
	return s.readyCheck, nil
}

// server is the HTTPS server of one replica.
type server struct {
	opts   Options
	ln     net.Listener
	live   client.Reader
	writer client.Client
	h      *handler
	// ready is closed once the server has its certificate; caBundle is
	// then the CA the APIService must trust.
	ready    chan struct{}
	caBundle []byte
	// loadErr is why the request-header CA could not be read the last
	// time (nil once it was), for readyCheck's message.
	loadErr atomic.Pointer[error]
}

// readyCheck fails until the server can answer agents: it has its serving
// certificate and has loaded the request-header CA at least once (later
// failures to re-read it keep the CA it has). It is a healthz.Checker.
func (s *server) readyCheck(_ *http.Request) error {
	select {
	case <-s.ready:
	default:
		return errors.New("the content API has no serving certificate yet")
	}
	if s.h.proxy.Load() != nil {
		return nil
	}
	msg := "the content API has not loaded the API server's request-header CA (" + metav1.NamespaceSystem + "/" + authConfigMap +
		") yet, so it cannot authenticate the aggregation layer and answers 503"
	if err := s.loadErr.Load(); err != nil {
		return fmt.Errorf("%s: %w", msg, *err)
	}
	return errors.New(msg)
}

// NeedLeaderElection: every replica serves.
func (s *server) NeedLeaderElection() bool { return false }

// Port is the port the server listens on.
func (s *server) port() int32 { return int32(s.ln.Addr().(*net.TCPAddr).Port) }

// Start loads the serving certificate and the request-header CA, then
// serves until ctx ends, reloading the CA every minute (the API server may
// rotate it), and every notReadyRetrySeconds until it is first loaded (the
// replica is not ready until then, see readyCheck).
func (s *server) Start(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("content-api")
	cert, ca, err := s.servingCert(ctx)
	if err != nil {
		_ = s.ln.Close()
		return fmt.Errorf("content API serving certificate: %w", err)
	}
	s.caBundle = ca
	close(s.ready)
	if err := s.reloadFrontProxy(ctx); err != nil {
		// Not fatal: until it is loaded every request is answered 503
		// (not ready: agents retry, they do not take it for a refused
		// credential), /readyz fails, and the refresh below keeps trying.
		l.Error(err, "reading the API server's request-header CA")
	}
	srv := &http.Server{Handler: s.h, TLSConfig: tlsConfig(cert), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		for {
			next := time.Minute
			if s.h.proxy.Load() == nil {
				next = notReadyRetrySeconds * time.Second
			}
			select {
			case <-ctx.Done():
				sc, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = srv.Shutdown(sc)
				cancel()
				return
			case <-time.After(next):
				if err := s.reloadFrontProxy(ctx); err != nil {
					l.Error(err, "reading the API server's request-header CA")
				}
			}
		}
	}()
	l.Info("serving the content API", "addr", s.ln.Addr().String())
	if err := srv.ServeTLS(s.ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("content API: %w", err)
	}
	return nil
}

// Keys of kube-system/extension-apiserver-authentication, which every API
// server with an aggregation layer publishes.
const (
	authConfigMap      = "extension-apiserver-authentication"
	keyRequestHeaderCA = "requestheader-client-ca-file"
	keyAllowedNames    = "requestheader-allowed-names"
	keyUserHeaders     = "requestheader-username-headers"
)

// reloadFrontProxy is loadFrontProxy, remembering its error for
// readyCheck.
func (s *server) reloadFrontProxy(ctx context.Context) error {
	err := s.loadFrontProxy(ctx)
	if err != nil {
		s.loadErr.Store(&err)
	} else {
		s.loadErr.Store(nil)
	}
	return err
}

func (s *server) loadFrontProxy(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	if err := s.live.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceSystem, Name: authConfigMap}, cm); err != nil {
		return err
	}
	ca := cm.Data[keyRequestHeaderCA]
	if ca == "" {
		return errors.New("the API server has no request-header CA (kube-apiserver --requestheader-client-ca-file): the aggregation layer is not configured")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ca)) {
		return errors.New("request-header CA is not PEM")
	}
	var names []string
	if raw := cm.Data[keyAllowedNames]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &names); err != nil {
			return fmt.Errorf("%s: %w", keyAllowedNames, err)
		}
	}
	userHeaders := []string{"X-Remote-User"}
	if raw := cm.Data[keyUserHeaders]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &userHeaders); err != nil {
			return fmt.Errorf("%s: %w", keyUserHeaders, err)
		}
	}
	s.h.proxy.Store(&frontProxy{pool: pool, names: names, userHeaders: userHeaders})
	return nil
}

// dnsNames are the names the serving certificate must carry; the
// aggregation layer verifies <service>.<namespace>.svc.
func (o Options) dnsNames() []string {
	return []string{o.Service + "." + o.Namespace + ".svc", o.Service + "." + o.Namespace + ".svc.cluster.local",
		o.Service + "." + o.Namespace, o.Service, "localhost"}
}

// tlsSecretName holds the serving CA and certificate, shared by replicas.
func (o Options) tlsSecretName() string { return o.Service + "-tls" }

// servingCert reads the shared serving certificate from its Secret, or
// creates it: replicas (and restarts) must serve the certificate the
// APIService's caBundle trusts. It is renewed when less than 90 days of
// its ten years remain or when the Service name changed.
func (s *server) servingCert(ctx context.Context) (cert *tls.Certificate, caPEM []byte, err error) {
	key := types.NamespacedName{Namespace: s.opts.Namespace, Name: s.opts.tlsSecretName()}
	for attempt := 0; attempt < 5; attempt++ {
		sec := &corev1.Secret{}
		err := s.live.Get(ctx, key, sec)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
		exists := err == nil
		if exists {
			if cert := s.usableCert(sec); cert != nil {
				return cert, sec.Data["ca.crt"], nil
			}
		}
		ca, err := pki.NewCA("fleet-content-api-ca")
		if err != nil {
			return nil, nil, err
		}
		crt, k, err := ca.Issue(pki.Leaf{CommonName: s.opts.Service, DNSNames: s.opts.dnsNames(),
			IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: 10 * 365 * 24 * time.Hour})
		if err != nil {
			return nil, nil, err
		}
		want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{fleet.ManagedLabel: "true"}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"ca.crt": ca.CertPEM, corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: k}}
		if exists {
			want.ResourceVersion = sec.ResourceVersion
			err = s.writer.Update(ctx, want)
		} else {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}
			if err := s.writer.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, nil, err
			}
			err = s.writer.Create(ctx, want)
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue // another replica won: use its certificate
		}
		if err != nil {
			return nil, nil, err
		}
		kp, err := tls.X509KeyPair(crt, k)
		return &kp, ca.CertPEM, err
	}
	return nil, nil, errors.New("the serving certificate Secret keeps changing")
}

// usableCert returns the Secret's certificate if it can be served as is:
// it parses, has its CA, has 90 days left and names the Service.
func (s *server) usableCert(sec *corev1.Secret) *tls.Certificate {
	cert, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil || len(sec.Data["ca.crt"]) == 0 {
		return nil
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil || time.Until(leaf.NotAfter) < 90*24*time.Hour || leaf.VerifyHostname(s.opts.dnsNames()[0]) != nil {
		return nil
	}
	return &cert
}

// registrar writes the Service (ExternalName mode) and the APIService. It
// runs on the leader only, and re-asserts both every minute so that an
// edit or a failover (in ExternalName mode the port is the leader's own)
// heals.
type registrar struct{ s *server }

func (r *registrar) NeedLeaderElection() bool { return true }

func (r *registrar) Start(ctx context.Context) error {
	l := log.FromContext(ctx).WithName("content-api")
	// The APIService must trust the certificate the server serves.
	select {
	case <-ctx.Done():
		return nil
	case <-r.s.ready:
	}
	for {
		if err := r.register(ctx); err != nil {
			l.Error(err, "registering the content API")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Minute):
		}
	}
}

func (r *registrar) register(ctx context.Context) error {
	o := r.s.opts
	port := o.Port
	if o.ExternalName != "" {
		port = r.s.port()
		if err := r.ensureService(ctx); err != nil {
			return err
		}
	}
	return ensureAPIService(ctx, r.s.live, r.s.writer, o, port, r.s.caBundle)
}

func (r *registrar) ensureService(ctx context.Context) error {
	o := r.s.opts
	svc := &corev1.Service{}
	err := r.s.live.Get(ctx, types.NamespacedName{Namespace: o.Namespace, Name: o.Service}, svc)
	if apierrors.IsNotFound(err) {
		svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: o.Service, Namespace: o.Namespace, Labels: map[string]string{fleet.ManagedLabel: "true"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: o.ExternalName}}
		return r.s.writer.Create(ctx, svc)
	}
	if err != nil {
		return err
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName && svc.Spec.ExternalName == o.ExternalName {
		return nil
	}
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: o.ExternalName}
	return r.s.writer.Update(ctx, svc)
}

// ensureAPIService creates or corrects the APIService. It is written as
// unstructured to keep the kube-aggregator module out of the build, so the
// spec holds what the API server returns: caBundle base64, numbers int64.
func ensureAPIService(ctx context.Context, live client.Reader, w client.Client, o Options, port int32, caBundle []byte) error {
	spec := map[string]any{
		"group":                contentapi.Group,
		"version":              contentapi.Version,
		"groupPriorityMinimum": int64(1000),
		"versionPriority":      int64(15),
		"caBundle":             base64.StdEncoding.EncodeToString(caBundle),
		"service":              map[string]any{"namespace": o.Namespace, "name": o.Service, "port": int64(port)},
	}
	cur := contentapi.APIService()
	err := live.Get(ctx, client.ObjectKeyFromObject(cur), cur)
	if apierrors.IsNotFound(err) {
		obj := contentapi.APIService()
		obj.Object["spec"] = spec
		obj.SetLabels(map[string]string{fleet.ManagedLabel: "true"})
		return w.Create(ctx, obj)
	}
	if err != nil {
		return err
	}
	have, _ := cur.Object["spec"].(map[string]any)
	svc, _ := have["service"].(map[string]any)
	if have["caBundle"] == spec["caBundle"] && svc != nil && svc["namespace"] == o.Namespace && svc["name"] == o.Service &&
		fmt.Sprint(svc["port"]) == strconv.Itoa(int(port)) {
		return nil
	}
	cur.Object["spec"] = spec
	return w.Update(ctx, cur)
}
