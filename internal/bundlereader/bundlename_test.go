package bundlereader

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Names of exactly 63 and 64 characters: the longest a fleet.yaml may give
// (a label value of every BundleDeployment) and the first it may not.
var (
	name63 = strings.Repeat("a", 30) + "." + strings.Repeat("b", 32)
	name64 = name63 + "c"
)

// TestBundleNameFromFleetYAML pins how a bundle is named, so that a
// repository moved from Rancher Fleet keeps its Bundles (a different name
// prunes the old Bundle and uninstalls its releases). The expected default
// names are Rancher Fleet's own test vectors for HelmReleaseName, spelt as
// the GitRepo name and path that produce them. A fleet.yaml `name:` is the
// Bundle name as written, as in Rancher Fleet; one the API server (or a
// BundleDeployment's label) would refuse fails the read, naming the file
// and the rule.
func TestBundleNameFromFleetYAML(t *testing.T) {
	cases := []struct {
		name    string
		repo    string
		files   map[string]string
		want    string // the only bundle's name
		wantErr []string
	}{
		// Derived from the GitRepo name and the path, as Rancher Fleet does.
		{name: "root", repo: "repo", files: map[string]string{"cm.yaml": "kind: A\n"}, want: "repo"},
		{name: "path", repo: "repo", files: map[string]string{"app/fleet.yaml": ""}, want: "repo-app"},
		{name: "nested path", repo: "repo", files: map[string]string{"a/b/fleet.yaml": ""}, want: "repo-a-b"},
		{name: "disallowed character", repo: "long-name-test", files: map[string]string{"shortpath-with@char/fleet.yaml": ""},
			want: "long-name-test-shortpath-with-char-031bab5e"},
		{name: "case, dot, underscore and space", repo: "long-name-test", files: map[string]string{"0.App_ /fleet.yaml": ""},
			want: "long-name-test-0-app-5bf6b3fb"},
		{name: "dotted name", repo: "bundle.name.example.com", files: map[string]string{"cm.yaml": "kind: A\n"},
			want: "bundle-name-example-com-645ef821"},
		{name: "over 53 characters", repo: "12345678901234567890123456789012345678901234567890123a", files: map[string]string{"cm.yaml": "kind: A\n"},
			want: "12345678901234567890123456789012345678901234567-fdba4"},
		{name: "over 53, no double dash", repo: "1234567890123456789012345678901234567890123456", files: map[string]string{"1234567/fleet.yaml": ""},
			want: "1234567890123456789012345678901234567890123456-d0bce"},

		// fleet.yaml name: as written.
		{name: "name as written", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: my-great-bundle\n"}, want: "my-great-bundle"},
		{name: "dotted name kept", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: my.app.v2\n"}, want: "my.app.v2"},
		{name: "63 characters kept", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: " + name63 + "\n"}, want: name63},
		{name: "name in fleet.yml", repo: "repo", files: map[string]string{"app/fleet.yml": "name: from-yml\n"}, want: "from-yml"},
		{name: "name of the root bundle", repo: "repo", files: map[string]string{"fleet.yaml": "name: top\n", "cm.yaml": "kind: A\n"}, want: "top"},

		// fleet.yaml name: the API server or a BundleDeployment label would refuse.
		{name: "upper case", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: Custom.Name\n"},
			wantErr: []string{`app/fleet.yaml: name "Custom.Name" is not a valid Bundle name`, "lower-case", `"custom-name-53c0fe75"`}},
		{name: "underscore", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: my_app\n"},
			wantErr: []string{`app/fleet.yaml: name "my_app"`, "lower-case letters, digits, '-' and '.'"}},
		{name: "64 characters", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: " + name64 + "\n"},
			wantErr: []string{"app/fleet.yaml: name", "64 characters", "at most 63", "BundleDeployment"}},
		{name: "253 characters", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: " + strings.Repeat("a", 253) + "\n"},
			wantErr: []string{"253 characters", "at most 63"}},
		{name: "leading dash", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: -app\n"}, wantErr: []string{`name "-app"`}},
		{name: "trailing dot", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: app.\n"}, wantErr: []string{`name "app."`}},
		{name: "empty part", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: a..b\n"}, wantErr: []string{`name "a..b"`}},
		{name: "space", repo: "repo", files: map[string]string{"app/fleet.yaml": "name: ' app'\n"}, wantErr: []string{`name " app"`}},
		{name: "invalid name in fleet.yml", repo: "repo", files: map[string]string{"app/fleet.yml": "name: Bad\n"},
			wantErr: []string{`app/fleet.yml: name "Bad"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRepo(t, withManifest(tc.files))
			bs, err := Read(context.Background(), tc.repo, dir, nil, Options{})
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("read succeeded with bundles %q, want an error", bundleNames(bs))
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				if bs != nil {
					t.Errorf("a failed read returned %d bundles", len(bs))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := bundleNames(bs); len(got) != 1 || got[0] != tc.want {
				t.Fatalf("bundles = %q, want [%s]", got, tc.want)
			}
		})
	}
}

// TestBundleNameOtherSources: the name of an options file of a driven scan
// and of the fleet.yaml given with `fleet apply -f` obey the same rule, and
// the error names that file.
func TestBundleNameOtherSources(t *testing.T) {
	dir := writeRepo(t, map[string]string{
		"app/cm.yaml":   "kind: ConfigMap\n",
		"app/good.yaml": "name: good.name\n",
		"app/bad.yaml":  "name: Bad.Name\n",
	})
	bs, err := ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "app", Options: "good.yaml"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := bundleNames(bs); len(got) != 1 || got[0] != "good.name" {
		t.Errorf("driven bundles = %q, want [good.name]", got)
	}
	_, err = ReadDriven(context.Background(), "repo", dir, []fleet.BundlePath{{Base: "app", Options: "bad.yaml"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), `app/bad.yaml: name "Bad.Name"`) {
		t.Errorf("driven, bad name: err = %v", err)
	}
	_, err = Read(context.Background(), "repo", dir, []string{"app"}, Options{FleetYAML: []byte("name: " + name64 + "\n")})
	if err == nil || !strings.Contains(err.Error(), "app/fleet.yaml: name") || !strings.Contains(err.Error(), "at most 63") {
		t.Errorf("-f, long name: err = %v", err)
	}
}

// TestBundleNameCheckedFirst: an invalid name fails the read before any
// chart is downloaded, so bad input costs nothing and fetches nothing.
func TestBundleNameCheckedFirst(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.NotFound(w, nil)
	}))
	defer srv.Close()
	dir := writeRepo(t, map[string]string{
		"fleet.yaml": "name: Not_Valid\nhelm:\n  repo: " + srv.URL + "\n  chart: web\n",
	})
	_, err := Read(context.Background(), "repo", dir, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), `fleet.yaml: name "Not_Valid"`) {
		t.Fatalf("err = %v", err)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests to the chart repository before the name was refused", n)
	}
}

// FuzzFleetYAMLName: whatever fleet.yaml says, a bundle name that is
// accepted is one the API server takes for a Bundle and for the
// bundle-name label of its BundleDeployments.
func FuzzFleetYAMLName(f *testing.F) {
	for _, s := range []string{"app", "my.app", "My-App", "a_b", "-a", "a.", "a..b", name63, name64, "ä", "a b", "1.2.3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		quoted, err := json.Marshal(name)
		if err != nil {
			t.Fatal(err)
		}
		fy, _, err := ParseFleetYAML([]byte("name: " + string(quoted) + "\n"))
		if err != nil || fy.Name == "" {
			return
		}
		if errs := validation.IsDNS1123Subdomain(fy.Name); len(errs) > 0 {
			t.Fatalf("name %q accepted, but it is no Bundle name: %v", fy.Name, errs)
		}
		if errs := validation.IsValidLabelValue(fy.Name); len(errs) > 0 {
			t.Fatalf("name %q accepted, but it is no label value: %v", fy.Name, errs)
		}
	})
}

// withManifest adds a manifest beside each fleet.yaml of files that has
// none: a bundle without resources is skipped, as in Rancher Fleet.
func withManifest(files map[string]string) map[string]string {
	out := maps.Clone(files)
	for name := range files {
		if base := path.Base(name); base != "fleet.yaml" && base != "fleet.yml" {
			continue
		}
		if cm := path.Join(path.Dir(name), "cm.yaml"); out[cm] == "" {
			out[cm] = "kind: A\n"
		}
	}
	return out
}
