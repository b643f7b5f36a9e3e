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
// longer, cuts it to 57 characters and appends "-" and 5 hex of its sha256,
// so that it fits a Kubernetes name (63). When the 57th character is not
// [a-z0-9] it cuts to 56 and appends 6 hex instead. This is Rancher Fleet's
// (and wrangler's) rule, kept exactly: cluster namespaces and registration
// ServiceAccounts must have the names Rancher Fleet gives them.
func SafeConcatName(parts ...string) string {
	name := strings.Join(parts, "-")
	if len(name) < 64 {
		return name
	}
	d := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(d[:])
	if c := name[56]; ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') {
		return name[:57] + "-" + h[:5]
	}
	return name[:56] + "-" + h[:6]
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

// Hex is the first n hex characters of the md5 of s (Rancher Fleet's name
// suffix; not used for security).
func Hex(s string, n int) string {
	d := md5.Sum([]byte(s)) //nolint:gosec // a name suffix, not security
	return hex.EncodeToString(d[:])[:n]
}

var (
	// disallowed are the characters HelmReleaseName replaces: "." and "_"
	// included, so that a name is also a DNS label.
	disallowed = regexp.MustCompile(`[^a-zA-Z0-9-]+`)
	multiDash  = regexp.MustCompile(`-+`)
	// helmRelease is Helm's release name pattern, dnsLabel RFC 1123's label.
	helmRelease = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dnsLabel    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// MaxHelmReleaseNameLen is Helm's limit on release names.
const MaxHelmReleaseNameLen = 53

// HelmReleaseName turns s into a Helm release name that is also a DNS label,
// exactly as Rancher Fleet does, because it names Bundles (GitRepo name
// joined with the bundle path) and releases: a different name would make a
// GitRepo moved from Rancher Fleet prune its Bundles and uninstall their
// releases, and break dependsOn. "/" becomes "-"; when the result has upper
// case or any character outside [a-zA-Z0-9-] ("." and "_" too), "-" and 8
// hex of its md5 are appended so that distinct inputs stay distinct; then it
// is lower-cased, every run of other characters becomes "-", runs of "-"
// collapse and leading or trailing "-" go. A valid result is cut to 53 by
// Limit; when nothing valid is left, the name is 24 hex of the md5 of s.
func HelmReleaseName(s string) string {
	orig := s
	s = strings.ReplaceAll(s, "/", "-")
	if s != strings.ToLower(s) || disallowed.MatchString(s) {
		s = s + "-" + Hex(s, 8)
	}
	s = strings.ToLower(s)
	s = disallowed.ReplaceAllLiteralString(s, "-")
	s = multiDash.ReplaceAllLiteralString(s, "-")
	s = strings.Trim(s, "-")
	if helmRelease.MatchString(s) && dnsLabel.MatchString(s) {
		return Limit(s, MaxHelmReleaseNameLen)
	}
	return Hex(orig, 24)
}

// Limit shortens s to count characters as Rancher Fleet does: a longer s
// keeps its first count-6 characters, then "-" (left out when the kept part
// already ends in "-", so the result is one shorter) and 5 hex of the md5 of
// the whole s. A count too small for the hash (6 or less) just cuts.
func Limit(s string, count int) string {
	if len(s) <= count {
		return s
	}
	const hexLen = 5
	if count <= hexLen+1 {
		return s[:count]
	}
	keep := s[:count-hexLen-1]
	sep := "-"
	if strings.HasSuffix(keep, "-") {
		sep = ""
	}
	return keep + sep + Hex(s, hexLen)
}
