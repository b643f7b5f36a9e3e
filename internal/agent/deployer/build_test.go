package deployer

import (
	"crypto/sha256"
	"io"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/kube"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/rest"
)

var cmGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

// fakeParse stands for Helm's Build: a manifest is a list of ConfigMap
// names, one per line; it counts its calls.
type fakeParse struct {
	calls  int
	client resource.RESTClient
	mapper meta.RESTMapper
}

func (f *fakeParse) parse(r io.Reader, _ bool) (kube.ResourceList, error) {
	f.calls++
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	m, err := f.mapper.RESTMapping(cmGVK.GroupKind(), cmGVK.Version)
	if err != nil {
		return nil, err
	}
	var list kube.ResourceList
	for name := range strings.FieldsSeq(string(data)) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(cmGVK)
		u.SetNamespace("ns")
		u.SetName(name)
		u.Object["data"] = map[string]any{"full": "object"}
		list = append(list, &resource.Info{Client: f.client, Mapping: m, Namespace: "ns", Name: name, Object: u})
	}
	return list, nil
}

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(cmGVK, meta.RESTScopeNamespace)
	return m
}

func deployedOf(manifest string, kinds ...schema.GroupVersionKind) *releaseObjects {
	ro := &releaseObjects{sum: sha256.Sum256([]byte(manifest))}
	for i, name := range strings.Fields(manifest) {
		gvk := cmGVK
		if i < len(kinds) {
			gvk = kinds[i]
		}
		ro.ids = append(ro.ids, objectID{gvk: gvk, namespace: "ns", name: name})
	}
	return ro
}

func infoNames(list kube.ResourceList) string {
	var s []string
	for _, i := range list {
		s = append(s, i.Name)
	}
	return strings.Join(s, ",")
}

func mustBuild(t *testing.T, c *actionClient, manifest string) kube.ResourceList {
	t.Helper()
	list, err := c.Build(strings.NewReader(manifest), false)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// An upgrade's manifests are parsed once: the new one's second parse gets
// the validation's result, and the old one, remembered from its
// deployment, is not parsed at all but answered with its objects' kinds
// and names, mapped, with a client of the action.
func TestBuildUpgradeParsesOnce(t *testing.T) {
	const old, next = "a\nb\nc", "a\nd"
	f := &fakeParse{client: &rest.RESTClient{}, mapper: testMapper()}
	c := &actionClient{fastApply: true, builds: builds{parse: f.parse, mapper: f.mapper, deployed: deployedOf(old)}}

	validated := mustBuild(t, c, next)
	current := mustBuild(t, c, old)
	target := mustBuild(t, c, next)
	if f.calls != 1 {
		t.Errorf("parsed %d times, want once (the new manifest)", f.calls)
	}
	if infoNames(current) != "a,b,c" || infoNames(target) != "a,d" {
		t.Errorf("current %s, target %s", infoNames(current), infoNames(target))
	}
	if target[0] != validated[0] {
		t.Errorf("the new manifest's second parse is not the validation's result")
	}
	for _, info := range current {
		if info.Client != f.client || info.Mapping == nil || info.Mapping.Resource.Resource != "configmaps" {
			t.Errorf("%s: client %v, mapping %v", info.Name, info.Client, info.Mapping)
		}
		if gvk := info.Object.GetObjectKind().GroupVersionKind(); gvk != cmGVK {
			t.Errorf("%s: object kind %v", info.Name, gvk)
		}
		if _, ok := info.Object.(*unstructured.Unstructured).Object["data"]; ok {
			t.Errorf("%s: the old object was parsed", info.Name)
		}
	}
	ro, ok := c.objectsOf(next)
	if !ok || len(ro.ids) != 2 || ro.ids[1].name != "d" || ro.ids[1].gvk != cmGVK || ro.sum != sha256.Sum256([]byte(next)) {
		t.Errorf("objectsOf(new manifest) = %+v, %v", ro, ok)
	}
	if _, ok := c.objectsOf("never built"); ok {
		t.Errorf("objectsOf a manifest never built answered")
	}
}

// Where the short cuts do not hold, Helm's parse answers.
func TestBuildParsesWhenUnsure(t *testing.T) {
	unknown := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gone"}
	other := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ConfigMap"}
	for _, tc := range []struct {
		name string
		// prepare sets the client up and returns the manifests to build,
		// in order, and the parses expected.
		prepare func(t *testing.T, c *actionClient) ([]string, int)
	}{
		{"same manifest before and after", func(t *testing.T, c *actionClient) ([]string, int) {
			c.deployed = deployedOf("a b")
			return []string{"a b", "a b", "a b"}, 2
		}},
		{"after the apply (a rollback)", func(t *testing.T, c *actionClient) ([]string, int) {
			c.deployed = deployedOf("a b")
			mustBuild(t, c, "a c")
			_, _ = c.Update(nil, nil)
			return []string{"a b", "a c"}, 3
		}},
		{"not an upgrade that applies without reading", func(t *testing.T, c *actionClient) ([]string, int) {
			c.fastApply = false
			c.deployed = deployedOf("a b")
			return []string{"a c", "a b", "a c"}, 2
		}},
		{"a kind that no longer maps", func(t *testing.T, c *actionClient) ([]string, int) {
			c.deployed = deployedOf("a b", cmGVK, unknown)
			return []string{"a c", "a b", "a c"}, 2
		}},
		{"a group without a client yet", func(t *testing.T, c *actionClient) ([]string, int) {
			c.mapper.(*meta.DefaultRESTMapper).Add(other, meta.RESTScopeNamespace)
			c.deployed = deployedOf("a b", other)
			return []string{"a c", "a b", "a c"}, 2
		}},
		{"another manifest than the deployed one", func(t *testing.T, c *actionClient) ([]string, int) {
			c.deployed = deployedOf("x y")
			return []string{"a c", "a b", "a c"}, 2
		}},
		{"the old manifest asked twice", func(t *testing.T, c *actionClient) ([]string, int) {
			c.deployed = deployedOf("a b")
			return []string{"a c", "a b", "a c", "a b"}, 2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeParse{client: &rest.RESTClient{}, mapper: testMapper()}
			c := &actionClient{fastApply: true, Client: &kube.Client{}, builds: builds{parse: f.parse, mapper: f.mapper}}
			manifests, want := tc.prepare(t, c)
			var lists []kube.ResourceList
			for _, m := range manifests {
				lists = append(lists, mustBuild(t, c, m))
			}
			if f.calls != want {
				t.Errorf("parsed %d times, want %d", f.calls, want)
			}
			// What the upgrade applies (the last list) is never a list it
			// was also given as the old objects (the one before).
			if n := len(lists); n >= 2 && lists[n-1][0] == lists[n-2][0] {
				t.Errorf("the same objects were handed out as old and new")
			}
		})
	}
}
