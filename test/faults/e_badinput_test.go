package faults

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
	"github.com/fleetgo/fleet/internal/agent/register"
	"github.com/fleetgo/fleet/internal/bundlereader"
	"github.com/fleetgo/fleet/internal/gitops/webhook"
	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
)

// TestBadInputCatalogue feeds malformed and hostile input to the real entry
// points — the bundle reader (fleet.yaml, charts, files of a git checkout),
// the manager API server's admission of Bundle and GitRepo specs, the
// agent's bootstrap Secret parser and the git webhook handler — and checks
// that each is refused with a precise error and that nothing stored in the
// manager cluster (Bundles, BundleDeployments, GitRepos) changed. More cases
// per area are listed in docs/reliability.md.
func TestBadInputCatalogue(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const ws = "faults-bad"
	_ = upstream.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ws}})
	g.Expect(upstream.Client.Create(ctx, &fleet.Bundle{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "bad-target"},
		Spec:       fleet.BundleSpec{Resources: []fleet.BundleResource{{Name: "cm.yaml", Content: configMap("x", "1")}}},
	})).To(Succeed())
	g.Expect(upstream.Client.Create(ctx, &fleet.GitRepo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ws, Name: "bad-repo"},
		Spec:       fleet.GitRepoSpec{Repo: "https://example.com/r.git"},
	})).To(Succeed())
	before := storedVersions(g)
	cases := 0

	// 1. Bundle reader: fleet.yaml, charts and files of a checkout.
	outside := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(outside, "secret.yaml"), []byte("kind: Secret\n"), 0o600)).To(Succeed())
	readerCases := []struct {
		name  string
		files map[string]string
		link  [2]string // symlink target, name
		paths []string
		opts  bundlereader.Options
		want  string
	}{
		{name: "fleet.yaml invalid YAML", files: map[string]string{"fleet.yaml": "helm: [unclosed"}, want: "invalid YAML"},
		{name: "fleet.yaml a list", files: map[string]string{"fleet.yaml": "- a\n"}, want: "not a list"},
		{name: "fleet.yaml wrong type", files: map[string]string{"fleet.yaml": "helm:\n  maxHistory: many\n"}, want: "invalid fleet.yaml"},
		{name: "dependsOn unknown state", files: map[string]string{"fleet.yaml": "dependsOn:\n- name: x\n  acceptedStates: [Done]\n"}, want: `"Done"`},
		{name: "invalid releaseName", files: map[string]string{"fleet.yaml": "helm:\n  releaseName: Bad_Name\n"}, want: "helm.releaseName"},
		{name: "chart outside the repo", files: map[string]string{"fleet.yaml": "helm:\n  chart: ../../etc\n"}, want: "outside the repository"},
		{name: "chart dir without Chart.yaml", files: map[string]string{"fleet.yaml": "helm:\n  chart: sub\n", "sub/x.yaml": "a: b\n"}, want: "no Chart.yaml"},
		{name: "unsupported chart source", files: map[string]string{"fleet.yaml": "helm:\n  chart: s3::https://example.com/x\n"}, want: "unsupported chart source"},
		{name: "values file is a list", files: map[string]string{"fleet.yaml": "helm:\n  valuesFiles: [v.yaml]\n", "v.yaml": "- x\n"}, want: "v.yaml"},
		{name: "symlink escaping the checkout", files: map[string]string{"fleet.yaml": ""}, link: [2]string{filepath.Join(outside, "secret.yaml"), "leak.yaml"}, want: "points outside the repository"},
		{name: "huge file", files: map[string]string{"fleet.yaml": "", "a.yaml": strings.Repeat("x", 4096)}, opts: bundlereader.Options{Limits: bundlereader.Limits{MaxFileSize: 1024}}, want: "larger than the limit"},
		{name: "too many files", files: map[string]string{"fleet.yaml": "", "a.yaml": "", "b.yaml": "", "c.yaml": ""}, opts: bundlereader.Options{Limits: bundlereader.Limits{MaxFiles: 2}}, want: "more than 2 files"},
		{name: "path escaping the checkout", files: map[string]string{"a.yaml": ""}, paths: []string{"../"}, want: "outside the repository"},
		// A leading "/" is the repository root, as in Rancher Fleet.
		{name: "absolute path", files: map[string]string{"a.yaml": ""}, paths: []string{"/etc"}, want: `path "etc" does not exist`},
		{name: "two bundles, one name", files: map[string]string{
			"a/fleet.yaml": "name: same\n", "a/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
			"b/fleet.yaml": "name: same\n", "b/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
		}, want: `"same"`},
	}
	for _, tc := range readerCases {
		dir := t.TempDir()
		for name, content := range tc.files {
			g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)).To(Succeed())
		}
		if tc.link[0] != "" {
			g.Expect(os.Symlink(tc.link[0], filepath.Join(dir, tc.link[1]))).To(Succeed())
		}
		bs, err := bundlereader.Read(ctx, "bad", dir, tc.paths, tc.opts)
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.name)
		g.Expect(bs).To(BeEmpty(), tc.name)
		t.Logf("bad input %-32s -> %v", tc.name, err)
		cases++
	}

	// 2. Admission by the manager's API server: specs of the wrong shape.
	admission := []struct {
		name, kind, obj string
		path            []string
		value           interface{}
	}{
		{name: "Bundle resources not a list", kind: "Bundle", obj: "bad-target", path: []string{"spec", "resources"}, value: "x"},
		{name: "Bundle targets not a list", kind: "Bundle", obj: "bad-target", path: []string{"spec", "targets"}, value: int64(5)},
		{name: "Bundle paused not a bool", kind: "Bundle", obj: "bad-target", path: []string{"spec", "paused"}, value: "yes"},
		{name: "Bundle negative maxUnavailable", kind: "Bundle", obj: "bad-target", path: []string{"spec", "rolloutStrategy", "maxUnavailable"}, value: int64(-1)},
		{name: "Bundle negative autoPartitionSize", kind: "Bundle", obj: "bad-target", path: []string{"spec", "rolloutStrategy", "autoPartitionSize"}, value: "-10%"},
		{name: "GitRepo repo not a string", kind: "GitRepo", obj: "bad-repo", path: []string{"spec", "repo"}, value: int64(1)},
		{name: "GitRepo paths not a list", kind: "GitRepo", obj: "bad-repo", path: []string{"spec", "paths"}, value: "a,b"},
		{name: "GitRepo targets not a list", kind: "GitRepo", obj: "bad-repo", path: []string{"spec", "targets"}, value: map[string]interface{}{"a": "b"}},
	}
	for _, tc := range admission {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(fleet.GroupVersion.String())
		u.SetKind(tc.kind)
		g.Expect(upstream.Client.Get(ctx, client.ObjectKey{Namespace: ws, Name: tc.obj}, u)).To(Succeed())
		g.Expect(unstructured.SetNestedField(u.Object, tc.value, tc.path...)).To(Succeed())
		err := upstream.Client.Update(ctx, u)
		g.Expect(apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)).To(BeTrue(), "%s: %v", tc.name, err)
		g.Expect(err.Error()).To(ContainSubstring(tc.path[len(tc.path)-1]), tc.name)
		t.Logf("bad input %-32s -> %v", tc.name, err)
		cases++
	}

	// 3. The agent's bootstrap Secret (a registration token as installed).
	bootstrap := []struct {
		name string
		data map[string][]byte
		want string
	}{
		{name: "bootstrap secret empty", data: map[string][]byte{}, want: "missing keys"},
		{name: "bootstrap secret token only", data: map[string][]byte{"token": []byte("garbage")}, want: "apiServerURL"},
		{name: "bootstrap secret no token", data: map[string][]byte{"apiServerURL": []byte("https://x"), "tokenName": []byte("t"), "clusterNamespace": []byte("ws")}, want: "token"},
	}
	for _, tc := range bootstrap {
		_, err := register.ParseBootstrap(tc.data)
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.name)
		g.Expect(err.Error()).NotTo(ContainSubstring("garbage"), "values never appear in errors")
		t.Logf("bad input %-32s -> %v", tc.name, err)
		cases++
	}

	// 4. Git webhooks: the real handler, with a configured GitHub secret.
	whSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.DefaultSystemNamespace, Name: webhook.DefaultSecretName},
		Data: webhooktest.SecretData("s3cret")}
	g.Expect(client.IgnoreAlreadyExists(upstream.Client.Create(ctx, whSecret))).To(Succeed())
	triggered := 0
	srv := httptest.NewServer(&webhook.Handler{Reader: upstream.Client, SystemNamespace: fleet.DefaultSystemNamespace,
		Trigger: func(context.Context, *fleet.GitRepo, *payload.Push) error { triggered++; return nil }})
	defer srv.Close()
	goodH, goodBody := webhooktest.Push(payload.GitHub, "https://example.com/r.git", strings.Repeat("a", 40))
	hooks := []struct {
		name string
		h    http.Header
		body []byte
	}{
		{name: "webhook without provider headers", h: http.Header{}, body: goodBody},
		{name: "webhook unsigned", h: goodH.Clone(), body: goodBody},
		{name: "webhook wrong signature", h: signed(goodH, goodBody, "wrong"), body: goodBody},
		{name: "webhook signed garbage body", h: signed(goodH, []byte("{not json"), "s3cret"), body: []byte("{not json")},
		{name: "webhook body tampered", h: signed(goodH, goodBody, "s3cret"), body: append(bytes.Clone(goodBody), ' ')},
	}
	for _, tc := range hooks {
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(tc.body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header = tc.h
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(BeNumerically(">=", 400), tc.name)
		g.Expect(resp.StatusCode).To(BeNumerically("<", 500), tc.name)
		t.Logf("bad input %-32s -> HTTP %d", tc.name, resp.StatusCode)
		cases++
	}
	g.Expect(triggered).To(BeZero(), "no refused webhook may trigger a sync")

	t.Logf("bad-input catalogue: %d cases", cases)
	g.Expect(cases).To(BeNumerically(">=", 30))
	g.Expect(storedVersions(g)).To(Equal(before), "refused input changed stored objects")
}

func signed(h http.Header, body []byte, secret string) http.Header {
	out := h.Clone()
	webhooktest.Sign(payload.GitHub, out, body, secret)
	return out
}

// storedVersions maps every Bundle, BundleDeployment and GitRepo of the
// manager cluster to its resourceVersion.
func storedVersions(g Gomega) map[string]string {
	ctx := context.Background()
	out := map[string]string{}
	bs := &fleet.BundleList{}
	g.Expect(upstream.Client.List(ctx, bs)).To(Succeed())
	for _, o := range bs.Items {
		out["Bundle/"+o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	bds := &fleet.BundleDeploymentList{}
	g.Expect(upstream.Client.List(ctx, bds)).To(Succeed())
	for _, o := range bds.Items {
		out["BundleDeployment/"+o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	grs := &fleet.GitRepoList{}
	g.Expect(upstream.Client.List(ctx, grs)).To(Succeed())
	for _, o := range grs.Items {
		out["GitRepo/"+o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}
