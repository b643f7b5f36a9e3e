// Package contentapi is how an agent reads the manifests its
// BundleDeployments name, without any per-cluster cluster-wide RBAC.
//
// Contents are cluster-scoped and shared by every cluster that deploys the
// same manifest, so letting an agent `get` one directly needs a
// ClusterRoleBinding per cluster. Kubernetes' RBAC authorizer walks every
// ClusterRoleBinding on every request of every user, so with 10,000
// clusters that walk was a third of the API server's CPU, and each rollout
// also had to rewrite each cluster's ClusterRole before publishing.
//
// Instead the manager serves a read-only, namespaced resource through the
// API server's aggregation layer:
//
//	GET /apis/content.fleet.cattle.io/v1alpha1/namespaces/<cluster namespace>/bundlecontents/<content name>
//
// The API server authenticates the agent and checks, with the agent's
// ordinary namespaced Role, that it may `get bundlecontents` in its own
// namespace; it then proxies the request to the manager, which answers only
// if a BundleDeployment in that namespace references the Content. Nothing
// is written per rollout, and no binding exists per cluster outside its
// namespace.
//
// This package holds the API's names and the agent's client; the manager's
// server is in package contentapi/serve.
package contentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// The aggregated API's coordinates.
const (
	Group    = "content.fleet.cattle.io"
	Version  = "v1alpha1"
	Resource = "bundlecontents"
	Kind     = "BundleContent"
	// APIServiceName is the name of the APIService object that registers
	// the API with the aggregation layer.
	APIServiceName = Version + "." + Group
)

// APIService returns an APIService object named APIServiceName with no
// spec, to read into or fill in. It is unstructured to keep the
// kube-aggregator module out of the build.
func APIService() *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("apiregistration.k8s.io/v1")
	o.SetKind("APIService")
	o.SetName(APIServiceName)
	return o
}

// DeploymentParam is the query parameter with which an agent names the
// BundleDeployment it reads a Content for: a hint that makes the manager's
// check cheap when its cache has not seen that deployment yet. It grants
// nothing: the deployment must still be in the request's namespace and
// reference the Content.
const DeploymentParam = "bundleDeployment"

// GroupResource identifies the resource in errors.
var GroupResource = schema.GroupResource{Group: Group, Resource: Resource}

// BundleContent is one Content as seen from a cluster namespace.
type BundleContent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Content is the gzip-compressed JSON manifest (as in Content).
	Content []byte `json:"content,omitempty"`
	// SHA256Sum is the hex sha256 of the uncompressed manifest.
	SHA256Sum string `json:"sha256sum,omitempty"`
}

// Path is the URL path of a BundleContent.
func Path(namespace, name string) string {
	return "/apis/" + Group + "/" + Version + "/namespaces/" + namespace + "/" + Resource + "/" + name
}

// Reader reads Contents for one agent. It asks the content API first; when
// the API server does not serve it at all (a manager started with
// --content-api-addr=0, which grants Contents through RBAC instead) it
// reads the Content directly, and keeps doing so for a while before trying
// the API again.
type Reader struct {
	// REST is a client of the agent's credential on the manager's API
	// server; any group version (only absolute paths are used).
	REST rest.Interface
	// direct is the unix time until which the content API is known to be
	// absent.
	direct atomic.Int64
}

// absentFor is how long a Reader goes direct after the API server said it
// does not serve the content API.
const absentFor = time.Minute

// Get returns the compressed manifest and its sha256 of the Content name,
// as visible from namespace, for the BundleDeployment named deployment
// (may be empty).
func (r *Reader) Get(ctx context.Context, namespace, name, deployment string) (content []byte, sum string, err error) {
	if time.Now().Unix() >= r.direct.Load() {
		req := r.REST.Get().AbsPath(Path(namespace, name))
		if deployment != "" {
			req = req.Param(DeploymentParam, deployment)
		}
		content, sum, err := fetch(ctx, req, Kind+" "+namespace+"/"+name)
		if err == nil {
			return content, sum, nil
		}
		switch {
		case apiAbsent(err):
			r.direct.Store(time.Now().Add(absentFor).Unix())
		case apierrors.IsForbidden(err):
			// A credential from before the content API (its Role lacks
			// bundlecontents) may still read Contents directly; if not,
			// the caller sees this error, not the second one.
			c, sum, derr := r.getDirect(ctx, name)
			if derr != nil {
				return nil, "", err
			}
			return c, sum, nil
		default:
			return nil, "", err
		}
	}
	return r.getDirect(ctx, name)
}

// getDirect GETs the cluster-scoped Content.
func (r *Reader) getDirect(ctx context.Context, name string) ([]byte, string, error) {
	return fetch(ctx, r.REST.Get().AbsPath("/apis/fleet.cattle.io/v1alpha1/contents/"+name), "Content "+name)
}

// fetch sends req and decodes the answer: a BundleContent or a Content,
// which carry the manifest in the same fields.
func fetch(ctx context.Context, req *rest.Request, what string) ([]byte, string, error) {
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		return nil, "", err
	}
	bc := &BundleContent{}
	if err := json.Unmarshal(raw, bc); err != nil {
		return nil, "", fmt.Errorf("decoding %s: %w", what, err)
	}
	return bc.Content, bc.SHA256Sum, nil
}

// apiAbsent tells the API server's own "no such resource" 404 (the API is
// not registered) from the content server's 404 for one object, which
// names the object in its details.
func apiAbsent(err error) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return true
	}
	d := se.Status().Details
	return d == nil || d.Name == ""
}

// NewReader builds a Reader on cfg, sharing httpClient's connections (the
// agent's upstream client) when it is given.
func NewReader(cfg *rest.Config, httpClient *http.Client) (*Reader, error) {
	rc, err := NewRESTClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &Reader{REST: rc}, nil
}

// NewRESTClient is a client of the content API (absolute paths only) on
// cfg, sharing httpClient's connections when it is given.
func NewRESTClient(cfg *rest.Config, httpClient *http.Client) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{}
	c.APIPath = "/apis"
	// The client-go scheme knows metav1.Status, so that errors decode with
	// their reason and details.
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if httpClient != nil {
		return rest.UnversionedRESTClientForConfigAndClient(c, httpClient)
	}
	return rest.UnversionedRESTClientFor(c)
}
