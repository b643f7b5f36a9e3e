// Package memlimit gives the Go garbage collector the container's memory
// limit. The runtime does not read cgroup limits: a manager holding the
// objects of 10,000 clusters lets its heap grow to twice the live data
// before collecting (GOGC=100), and under the chart's 1 GiB limit that
// headroom alone can get the container OOM-killed. With a soft limit the
// collector works harder as the heap nears the limit instead.
package memlimit

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Ratio is the share of the container limit given to the Go runtime; the
// rest is for memory the runtime does not count (thread stacks outside
// the heap, mapped program text, cgo).
const Ratio = 0.9

// cgroup files that hold the memory limit, v2 then v1.
var limitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Apply sets the runtime's soft memory limit to Ratio of the cgroup
// memory limit, unless GOMEMLIMIT is set (the operator's choice wins) or
// there is no limit. It returns the limit it set, 0 if none.
func Apply() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	for _, f := range limitFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if limit, ok := ParseLimit(string(b)); ok {
			return ApplyLimit(limit)
		}
	}
	return 0
}

// ApplyLimit sets the soft memory limit for a container limit of limit
// bytes, as Apply does from the cgroup, and returns it.
func ApplyLimit(limit int64) int64 {
	soft := int64(float64(limit) * Ratio)
	debug.SetMemoryLimit(soft)
	return soft
}

// noLimit is above any real limit: cgroup v1 reports "unlimited" as a
// page-aligned value near the int64 maximum.
const noLimit = 1 << 60

// ParseLimit reads a cgroup memory limit file's content: a number of
// bytes, or "max" (v2) / a huge number (v1) for no limit.
func ParseLimit(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= noLimit {
		return 0, false
	}
	return n, true
}
