package bundledeployment_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/deployer"
)

// With the DefaultServiceAccount watched, a deploy never looks the
// account up, and creating or deleting it changes the identity the next
// deploy uses as soon as the watch sees it.
func TestDefaultServiceAccountFromWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const agent, ns = "sa-watch-agent", "sa-watch-ns"
	must(t, down.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agent}}))
	cs, err := kubernetes.NewForConfig(down.Config)
	must(t, err)
	accounts := deployer.NewDefaultAccounts(cs, agent)
	accounts.Start(ctx)
	if !accounts.WaitForSync(ctx) {
		t.Fatal("the watch did not list")
	}
	var log requestLog
	dep, err := deployer.NewWithOptions(deployer.Options{Config: log.config(), AgentNamespace: agent, DefaultAccounts: accounts})
	must(t, err)
	opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns}
	deploy := func(rev int) error {
		m := configMaps(fmt.Sprintf("metadata:\n  name: watched\ndata:\n  rev: \"%d\"\n", rev))
		_, err := dep.Deploy(ctx, deployer.Input{Name: "sa-watch", Manifest: m, Options: opts})
		return err
	}
	must(t, deploy(1))

	// The account appears: deploys impersonate it, and it may do nothing.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: deployer.DefaultServiceAccount, Namespace: agent}}
	must(t, down.Client.Create(ctx, sa))
	identity := "system:serviceaccount:" + agent + ":" + deployer.DefaultServiceAccount
	rev := 2
	eventually(t, "a deploy as "+identity, func() error {
		err := deploy(rev)
		rev++
		if err == nil || !strings.Contains(err.Error(), identity) {
			return fmt.Errorf("deploy: %v", err)
		}
		return nil
	})
	// It goes: deploys use the agent's own identity again.
	must(t, down.Client.Delete(ctx, sa))
	eventually(t, "a deploy as the agent again", func() error {
		err := deploy(rev)
		rev++
		return err
	})
	cm, err := configMap(t, ns, "watched")
	must(t, err)
	if cm.Data["rev"] != fmt.Sprint(rev-1) {
		t.Errorf("deployed rev %q, want %d", cm.Data["rev"], rev-1)
	}
	for _, r := range log.reset() {
		if strings.Contains(r, "/serviceaccounts/") {
			t.Errorf("a deploy looked the account up: %s", r)
		}
	}
}
