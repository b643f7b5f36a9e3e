package devenv

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/registration"
)

// Names of what the quickstart creates in the manager cluster.
const (
	Workspace         = fleet.DefaultWorkspace
	GitRepoName       = "examples"
	devTokenName      = "dev-token"
	prodClusterName   = "prod"
	prodKubeconfig    = "prod-kubeconfig"
	agentNamespace    = fleet.DefaultSystemNamespace
	agentSecretName   = "fleet-agent"
	bootstrapName     = "fleet-agent-bootstrap"
	agentConfigMapKey = "config"
)

// ExampleBundlePaths are the folders of examples/ the GitRepo deploys.
var ExampleBundlePaths = []string{"simple", "kustomize", "helm"}

// setupFleet installs the CRDs, starts the manager, registers both clusters,
// starts their agents and creates the GitRepo. Every step is idempotent, so
// a resumed run only starts processes.
func (e *Env) setupFleet(ctx context.Context) error {
	up, dev, prod := e.planes[0], e.planes[1], e.planes[2]
	e.phase("installing the Fleet CRDs in the upstream cluster")
	quietControllerRuntimeLog()
	if _, err := envtest.InstallCRDs(up.config, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(e.opts.RepoRoot, "charts", "fleet-crd", "templates")},
		ErrorIfPathMissing: true,
		MaxTime:            2 * time.Minute,
	}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	uc, err := e.Client(Upstream)
	if err != nil {
		return err
	}
	// What installing the fleet chart creates besides the controller.
	for _, ns := range []string{Workspace, fleet.DefaultSystemNamespace, fleet.DefaultSystemRegistrationNamespace} {
		if err := ensureNamespace(ctx, uc, ns); err != nil {
			return err
		}
	}

	e.phase("starting bin/fleet-controller")
	if err := e.startChild(procSpec{
		Name: "fleet-controller",
		Path: filepath.Join(e.binDir(), "fleet-controller"),
		Args: []string{
			"--kubeconfig=" + up.kubeconfig(),
			"--api-server-url=" + up.url(),
			"--api-server-ca-file=" + up.pki().caCert(),
			"--metrics-bind-address=0",
			"--health-probe-bind-address=0",
			"--webhook-bind-address=0",
			"--leader-elect=false",
			// No local cluster: the quickstart's clusters are dev and prod.
			"--bootstrap-namespace=",
			"--agent-checkin-interval=" + e.opts.CheckinInterval.String(),
			// The API server is a local process too: the content API
			// listens on loopback and is registered as ExternalName.
			"--content-api-addr=127.0.0.1:0",
			"--content-api-external-name=127.0.0.1",
		},
		LogPath: filepath.Join(e.opts.StateDir, "logs", "fleet-controller.log"),
	}); err != nil {
		return err
	}

	e.phase("registering the dev cluster (agent-initiated: registration token, labels env=dev)")
	if err := e.registerAgentInitiated(ctx, uc, dev); err != nil {
		return fmt.Errorf("registering dev: %w", err)
	}
	e.phase("registering the prod cluster (manager-initiated: kubeconfig Secret + Cluster, labels env=prod)")
	if err := e.registerManagerInitiated(ctx, uc, prod); err != nil {
		return fmt.Errorf("registering prod: %w", err)
	}
	for _, cp := range []*controlPlane{dev, prod} {
		if cp == prod {
			// The manager installs the agent downstream first (namespace,
			// bootstrap Secret): an agent started before it would find no
			// namespace for its leader-election Lease and wait a whole
			// retry period (10 s) to try again.
			e.waitImported(ctx, uc, prodClusterName, importWait)
		}
		e.phase("starting bin/fleet-agent for " + cp.name)
		if err := e.startChild(procSpec{
			Name: "fleet-agent-" + cp.name,
			Path: filepath.Join(e.binDir(), "fleet-agent"),
			Args: []string{
				"--kubeconfig=" + cp.kubeconfig(),
				"--checkin-interval=" + e.opts.CheckinInterval.String(),
			},
			LogPath: filepath.Join(e.opts.StateDir, "logs", "fleet-agent-"+cp.name+".log"),
		}); err != nil {
			return err
		}
	}

	created, err := e.ensureGitRepo(ctx, uc)
	if err != nil {
		return fmt.Errorf("creating GitRepo %s/%s: %w", Workspace, GitRepoName, err)
	}
	if created {
		e.phase("created GitRepo " + Workspace + "/" + GitRepoName + " for " + e.RepoURL())
	} else {
		e.phase("GitRepo " + Workspace + "/" + GitRepoName + " kept from the earlier run")
	}
	return nil
}

// importWait bounds how long setup waits for the manager to install the
// prod agent before starting it anyway (it then waits on its own).
const importWait = time.Minute

// waitImported waits until Cluster name reports the agent installed
// downstream (Imported), as a cluster's agent pod starts only once the
// manager has installed it, or until timeout.
func (e *Env) waitImported(ctx context.Context, uc client.Client, name string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cl := &fleet.Cluster{}
		if err := uc.Get(ctx, client.ObjectKey{Namespace: Workspace, Name: name}, cl); err == nil &&
			meta.IsStatusConditionTrue(cl.Status.Conditions, fleet.ConditionImported) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (e *Env) startChild(spec procSpec) error {
	p, err := startProc(spec)
	if err != nil {
		return err
	}
	e.children = append(e.children, p)
	return e.table.add(p.name, p.cmd.Process.Pid)
}

// registerAgentInitiated does what an admin does for an agent-initiated
// registration: create a ClusterRegistrationToken, wait for its values, and
// put them (the bootstrap Secret) and the agent config (labels env=dev) into
// the downstream cluster. A cluster whose agent already holds its own
// credential (Secret fleet-agent) is left alone.
func (e *Env) registerAgentInitiated(ctx context.Context, uc client.Client, dev *controlPlane) error {
	dc, err := e.Client(Dev)
	if err != nil {
		return err
	}
	registered := &corev1.Secret{}
	if err := dc.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: agentSecretName}, registered); err == nil {
		e.logf("    dev already registered (Secret %s/%s exists downstream)", agentNamespace, agentSecretName)
		return nil
	}
	tok := &fleet.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: devTokenName, Namespace: Workspace}}
	if err := uc.Create(ctx, tok); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	values := &corev1.Secret{}
	if err := poll(ctx, 2*time.Minute, func() (bool, error) {
		err := uc.Get(ctx, client.ObjectKey{Namespace: Workspace, Name: devTokenName}, values)
		return err == nil && len(values.Data["values"]) > 0, client.IgnoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("waiting for the values Secret of ClusterRegistrationToken %s/%s (is fleet-controller running? see %s): %w",
			Workspace, devTokenName, filepath.Join(e.opts.StateDir, "logs", "fleet-controller.log"), err)
	}
	v := registration.Values{}
	if err := yaml.Unmarshal(values.Data["values"], &v); err != nil {
		return fmt.Errorf("token values: %w", err)
	}
	cfg, _ := json.Marshal(registration.AgentConfig{Labels: map[string]string{"env": "dev"}})
	if err := ensureNamespace(ctx, dc, agentNamespace); err != nil {
		return err
	}
	for _, o := range []client.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: agentSecretName, Namespace: agentNamespace},
			Data:       map[string]string{agentConfigMapKey: string(cfg)},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: bootstrapName, Namespace: agentNamespace},
			Data: map[string][]byte{
				"apiServerURL":                []byte(v.APIServerURL),
				"apiServerCA":                 []byte(v.APIServerCA),
				"token":                       []byte(v.Token),
				"tokenName":                   []byte(v.TokenName),
				"clusterNamespace":            []byte(v.ClusterNamespace),
				"systemRegistrationNamespace": []byte(v.SystemRegistrationNamespace),
			},
		},
	} {
		if err := createOrReplace(ctx, dc, o); err != nil {
			return err
		}
	}
	return nil
}

// registerManagerInitiated creates the kubeconfig Secret and the Cluster;
// the manager then puts the bootstrap Secret into the downstream cluster.
func (e *Env) registerManagerInitiated(ctx context.Context, uc client.Client, prod *controlPlane) error {
	kc, err := prod.embeddedKubeconfig()
	if err != nil {
		return err
	}
	if err := createOrReplace(ctx, uc, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: prodKubeconfig, Namespace: Workspace},
		Data:       map[string][]byte{"value": kc},
	}); err != nil {
		return err
	}
	cl := &fleet.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: prodClusterName, Namespace: Workspace, Labels: map[string]string{"env": "prod"}},
		Spec:       fleet.ClusterSpec{KubeConfigSecret: prodKubeconfig},
	}
	if err := uc.Create(ctx, cl); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// ensureGitRepo creates the example GitRepo unless it exists (a resumed
// run keeps it as the user may have changed it), and says which.
func (e *Env) ensureGitRepo(ctx context.Context, uc client.Client) (created bool, err error) {
	gr := &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Name: GitRepoName, Namespace: Workspace},
		Spec: fleet.GitRepoSpec{
			Repo:            e.RepoURL(),
			Branch:          "main",
			Paths:           ExampleBundlePaths,
			PollingInterval: &metav1.Duration{Duration: e.opts.PollingInterval},
			Targets: []fleet.GitTarget{{
				Name: "dev-and-prod",
				ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"dev", "prod"},
				}}},
			}},
		},
	}
	err = uc.Create(ctx, gr)
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	return err == nil, err
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// createOrReplace creates o, or overwrites an existing object's data.
func createOrReplace(ctx context.Context, c client.Client, o client.Object) error {
	err := c.Create(ctx, o)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing := o.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(o), existing); err != nil {
		return err
	}
	o.SetResourceVersion(existing.GetResourceVersion())
	return c.Update(ctx, o)
}

// poll calls cond every 500ms until it is true, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// quietControllerRuntimeLog gives controller-runtime a logger when nobody
// has (the CLI does not), so that InstallCRDs does not print a warning with
// a stack trace; its messages are not useful to a quickstart user.
func quietControllerRuntimeLog() {
	logOnce.Do(func() { ctrllog.SetLogger(logr.Discard()) })
}

var logOnce sync.Once
