package contentapi

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The content API also hands registering agents their credential, in
// place of a hand-over Secret. With the Secret, each registration cost the
// API server six more writes (the Secret, a Role and a RoleBinding that let
// the registration token read just that Secret, and the deletion of all
// three) and RBAC evaluated every waiting registration's binding on every
// agent's check. Here the token's own Role allows `watch
// registrationcredentials` in its workspace once, and the manager decides
// per request, from the caller's identity, which registration's credential
// it may have: that of a registration made with this token. Nothing is
// written for the hand-over; the credential (a TokenRequest token) is
// minted when it is fetched.
//
//	GET /apis/content.fleet.cattle.io/v1alpha1/namespaces/<workspace>/registrationcredentials?watch=true&fieldSelector=metadata.name%3D<registration>
//
// The watch ends with one ADDED event carrying the credential once the
// registration is granted, or an ERROR event (403) when it is refused, or
// with no event when its timeout passes first. A GET of
// .../registrationcredentials/<registration> answers at once: the
// credential, or 404 while it is not granted.
const (
	CredentialResource = "registrationcredentials"
	CredentialKind     = "RegistrationCredential"
)

// HandoverAnnotation on a ClusterRegistration asks the manager to hand the
// credential over through the content API (HandoverContentAPI) instead of
// a Secret. An agent sets it only after discovery showed it that the API
// serves CredentialResource; a manager that does not serve it, or an agent
// that does not set it (Rancher Fleet's), uses the Secret as before.
const (
	HandoverAnnotation = "fleet.cattle.io/credential-handover"
	HandoverContentAPI = "content-api"
)

// CredentialGroupResource identifies the credential resource in errors.
var CredentialGroupResource = schema.GroupResource{Group: Group, Resource: CredentialResource}

// RegistrationCredential is what a granted registration's agent gets: the
// same fields as the hand-over Secret.
type RegistrationCredential struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Token is the credential of the cluster's ServiceAccount.
	Token string `json:"token"`
	// DeploymentNamespace is the cluster namespace (its BundleDeployments).
	DeploymentNamespace string `json:"deploymentNamespace"`
	// ClusterNamespace and ClusterName name the Cluster (workspace, name).
	ClusterNamespace string `json:"clusterNamespace"`
	ClusterName      string `json:"clusterName"`
	// SystemNamespace is the manager's namespace.
	SystemNamespace string `json:"systemNamespace,omitempty"`
}

// CredentialRequest is one agent's request for the credential of
// registration Namespace/Name, as the aggregation layer forwarded it.
type CredentialRequest struct {
	// User is the authenticated caller (the aggregation layer's user
	// header): the registration token's ServiceAccount.
	User      string
	Namespace string
	Name      string
	// Wait makes the call block until the registration is granted or
	// refused, or ctx ends (then it returns nil, nil).
	Wait bool
}

// Credentials answers CredentialRequests (the manager's registration
// controller). Errors are API errors: NotFound while the registration is
// unknown or (without Wait) not granted yet, Forbidden when the caller may
// not have it or the registration was refused.
type Credentials interface {
	Credential(ctx context.Context, r CredentialRequest) (*RegistrationCredential, error)
}

// CredentialPath is the URL path of the registration credentials of a
// workspace.
func CredentialPath(namespace string) string {
	return "/apis/" + Group + "/" + Version + "/namespaces/" + namespace + "/" + CredentialResource
}
