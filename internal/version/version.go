// Package version reports the build's version, set with -ldflags -X.
package version

// Version and GitCommit are overridden at link time.
var (
	Version   = "v0.1.0-dev"
	GitCommit = "unknown"
)

// String is "<version> (<commit>)".
func String() string { return Version + " (" + GitCommit + ")" }

// BuildTags are the build tags every Fleet binary is built with (Makefile,
// build/Dockerfile, `fleet dev`, the scale harness and the tests that build
// binaries). kustomize links Go's plugin package unless told not to; with
// it, the linker keeps every exported symbol, which costs the agent about a
// third of its binary size and ~20 MiB of resident memory. Fleet never loads
// kustomize Go plugins.
const BuildTags = "kustomize_disable_go_plugin_support"
