// Package names builds the object names Fleet derives from other names:
// cluster namespaces, registration secrets, Helm release and bundle names.
// They must match Rancher Fleet's so that existing clusters and tooling find
// the same objects.
package names

import (
	"crypto/md5" //nolint:gosec // Fleet uses md5 for name suffixes, not for security.
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// KeyHash is the first 12 hex characters of the sha256 of the first 100
// characters of s.
func KeyHash(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])[:12]
}

// SafeConcatName joins parts with "-" and, when the result is 64 characters or
// longer, truncates it to 57 characters and appends a 5-character hash of the
// full name, so that it fits a Kubernetes name (63).
func SafeConcatName(parts ...string) string {
	name := strings.Join(parts, "-")
	if len(name) < 64 {
		return name
	}
	d := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(d[:])[:5]
	return strings.TrimRight(name[:57], "-.") + "-" + h
}

// ClusterNamespace is the namespace that holds a Cluster's BundleDeployments:
// cluster-<workspace>-<name>-<hash>.
func ClusterNamespace(workspace, cluster string) string {
	return SafeConcatName("cluster", workspace, cluster, KeyHash(workspace+"::"+cluster))
}

// ContentRoleName is the ClusterRole that lets the agent of a cluster
// namespace read its Contents when the content API is off (registration
// binds it, the Content controller keeps it).
func ContentRoleName(clusterNamespace string) string { return "fleet-content-" + clusterNamespace }

// ContentBindingName is the ClusterRoleBinding that gives the agent
// credential (ServiceAccount) sa its cluster's Content role.
func ContentBindingName(sa string) string { return sa + "-content" }

// ClusterNameForClientID is the name of a Cluster created at registration.
func ClusterNameForClientID(clientID string) string {
	return "cluster-" + KeyHash(clientID)
}

// RegistrationSecretName is where the manager puts a granted credential:
// c-<hex(sha256(clientID+clientRandom))> truncated to 63 characters.
func RegistrationSecretName(clientID, clientRandom string) string {
	d := sha256.Sum256([]byte(clientID + clientRandom))
	n := "c-" + hex.EncodeToString(d[:])
	if len(n) > 63 {
		n = n[:63]
	}
	return n
}

var disallowed = regexp.MustCompile(`[^a-z0-9.-]`)
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// MaxHelmReleaseNameLen is Helm's limit on release names.
const MaxHelmReleaseNameLen = 53

// HelmReleaseName turns s into a valid Helm release name as Fleet does: "/"
// becomes "-", it is lowercased, other disallowed characters become "-" (with
// an 8-hex md5 suffix when anything had to change, so distinct inputs stay
// distinct), and it is limited to 53 characters with a 5-hex suffix.
func HelmReleaseName(s string) string {
	if dnsLabel.MatchString(s) && len(s) <= MaxHelmReleaseNameLen {
		return s
	}
	orig := s
	s = strings.ReplaceAll(s, "/", "-")
	lower := strings.ToLower(s)
	clean := disallowed.ReplaceAllString(lower, "-")
	clean = strings.Trim(clean, "-.")
	for strings.Contains(clean, "--") {
		clean = strings.ReplaceAll(clean, "--", "-")
	}
	if clean != s {
		d := md5.Sum([]byte(orig)) //nolint:gosec
		clean = clean + "-" + hex.EncodeToString(d[:])[:8]
	}
	return Limit(clean, MaxHelmReleaseNameLen)
}

// Limit shortens s to n characters, replacing the tail with a 5-hex hash of s
// when it has to cut.
func Limit(s string, n int) string {
	if len(s) <= n {
		return s
	}
	d := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(d[:])[:5]
	return strings.TrimRight(s[:n-6], "-.") + "-" + h
}
