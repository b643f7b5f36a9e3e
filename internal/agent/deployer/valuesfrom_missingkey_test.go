package deployer

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// TestValuesFromMissingKeyFailsDeploy: a valuesFrom ConfigMap or Secret that
// exists but lacks the named key (a typo, a Secret not yet filled) fails the
// deploy with an error naming the kind, namespace/name and key, as Rancher
// Fleet does, instead of deploying the chart with its defaults and
// reporting Ready. The release deployed before stays as it was, and no
// value of the object is quoted. A missing object fails the deploy too.
func TestValuesFromMissingKeyFailsDeploy(t *testing.T) {
	ctx := context.Background()
	down := downstream(t)
	d := newTestDeployer(t)
	const ns = "vf-missing-key"
	if _, err := down.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const secretValue = "hunter2-do-not-log"
	if _, err := down.Clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vals", Namespace: ns},
		Data: map[string]string{"values.yaml": "replicas: 3\n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := down.Clientset.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
		Data: map[string][]byte{"other.yaml": []byte("password: " + secretValue + "\n")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deploy := func(vf fleet.ValuesFrom) error {
		opts := fleet.BundleDeploymentOptions{DefaultNamespace: ns, Helm: &fleet.HelmOptions{Chart: "chart",
			ValuesFrom: []fleet.ValuesFrom{vf}}}
		_, err := deployFiles(t, d, "vf-missing-key", webChart, opts)
		return err
	}

	// A first deploy with the right key: 3 replicas from the ConfigMap.
	if err := deploy(fleet.ValuesFrom{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{Name: "vals"}}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		vf   fleet.ValuesFrom
		want string
	}{
		{name: "configmap key typo", vf: fleet.ValuesFrom{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{Name: "vals", Key: "value.yaml"}},
			want: `key "value.yaml" is missing from configmap vf-missing-key/vals`},
		{name: "secret default key absent", vf: fleet.ValuesFrom{SecretKeyRef: &fleet.SecretKeySelector{Namespace: ns, Name: "creds"}},
			want: `key "values.yaml" is missing from secret vf-missing-key/creds`},
		// A missing object keeps failing the deploy as before (retried
		// with backoff until it is created).
		{name: "configmap absent", vf: fleet.ValuesFrom{ConfigMapKeyRef: &fleet.ConfigMapKeySelector{Name: "absent"}},
			want: `valuesFrom configmap absent: configmaps "absent" not found`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := deploy(c.vf)
			if err == nil {
				t.Fatalf("deploy succeeded; want it refused with %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name the missing key: want %q", err, c.want)
			}
			if strings.Contains(err.Error(), secretValue) {
				t.Fatalf("error quotes a Secret value: %q", err)
			}
			dep, err := down.Clientset.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("deployed Deployment gone after the refused deploy: %v", err)
			}
			if r := replicas(dep); r != 3 {
				t.Fatalf("replicas %d after the refused deploy, want the 3 deployed before", r)
			}
		})
	}
}
