// Package version reports the build's version, set with -ldflags -X.
package version

// Version and GitCommit are overridden at link time.
var (
	Version   = "v0.1.0-dev"
	GitCommit = "unknown"
)

// String is "<version> (<commit>)".
func String() string { return Version + " (" + GitCommit + ")" }
