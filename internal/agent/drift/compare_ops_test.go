package drift

import (
	"testing"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Every JSON patch operation of a matching comparePatches entry is applied
// to both sides before they are compared, as in Rancher Fleet; an
// operation that fails on one side is skipped there (a failing test also
// skips the rest of its entry) and never hides real drift elsewhere. The
// desired side is normalized first, so an operation on a Secret's /data/k
// also finds a key the chart sets in stringData, and one on /stringData/k
// (the path as the chart writes it) acts on /data/k on both sides.
func TestDiffComparePatchOperations(t *testing.T) {
	scaled := replace(liveDeploy, "replicas: 2\n  progress", "replicas: 5\n  progress")
	scaledRed := replace(scaled, "  labels: {app: x}\n  annotations", "  labels: {app: x, team: red}\n  annotations")
	scaledBlue := replace(scaled, "  labels: {app: x}\n  annotations", "  labels: {app: x, team: blue}\n  annotations")
	desiredBlue := replace(desiredDeploy, "labels: {app: x}}", "labels: {app: x, team: blue}}")
	newImage := replace(scaled, "image: img:1", "image: img:2")
	ops := func(kind string, o ...fleet.Operation) []fleet.ComparePatch {
		return []fleet.ComparePatch{{Kind: kind, Name: "app", Operations: o}}
	}
	replicas0 := fleet.Operation{Op: "replace", Path: "/spec/replicas", Value: "0"}
	// A chart's Secret in stringData against the data the API server
	// stored; the user changed k downstream.
	const secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: app}\n"
	secretDesired := secret + "stringData: {k: chart-value, other: same}\n"
	secretLive := secret + "data: {k: dXNlci12YWx1ZQ==, other: c2FtZQ==}\n"
	dataK := func(op string) fleet.Operation { return fleet.Operation{Op: op, Path: "/data/k", Value: "eA=="} }
	// The same, named as the chart sets it.
	stringDataK := func(op, value string) fleet.Operation {
		return fleet.Operation{Op: op, Path: "/stringData/k", Value: value}
	}
	pointers := func(p ...string) []fleet.ComparePatch {
		return []fleet.ComparePatch{{Kind: "Secret", Name: "app", JSONPointers: p}}
	}
	tests := []struct {
		name     string
		desired  string
		live     string
		patches  []fleet.ComparePatch
		modified bool
	}{
		{name: "no patch: scaled is drift", desired: desiredDeploy, live: scaled, modified: true},
		{name: "replace on both sides", desired: desiredDeploy, live: scaled, patches: ops("Deployment", replicas0)},
		{name: "add over an existing value on both sides", desired: desiredDeploy, live: scaled,
			patches: ops("Deployment", fleet.Operation{Op: "add", Path: "/spec/replicas", Value: "1"})},
		{name: "replace of a path only live has", desired: replace(desiredDeploy, "  replicas: 2\n", ""), live: scaled,
			patches: ops("Deployment", replicas0)},
		{name: "remove of a missing path does not stop the next operation", desired: desiredDeploy, live: scaled,
			patches: ops("Deployment", fleet.Operation{Op: "remove", Path: "/spec/nothing/here"}, replicas0)},
		{name: "failing replace skipped, later operation applied", desired: desiredDeploy, live: scaled,
			patches: ops("Deployment", fleet.Operation{Op: "replace", Path: "/spec/nothing/here", Value: "x"}, replicas0)},
		{name: "test holding on both sides", desired: desiredBlue, live: scaledBlue,
			patches: ops("Deployment", fleet.Operation{Op: "test", Path: "/metadata/labels/team", Value: "blue"}, replicas0)},
		{name: "test failing on live guards the rest of its entry", desired: desiredBlue, live: scaledRed,
			patches: ops("Deployment", fleet.Operation{Op: "test", Path: "/metadata/labels/team", Value: "blue"}, replicas0), modified: true},
		{name: "a failing test does not guard other entries", desired: desiredBlue, live: replace(scaledRed, "team: red", "team: blue"),
			patches: append(ops("Deployment", fleet.Operation{Op: "test", Path: "/metadata/labels/team", Value: "green"}), ops("Deployment", replicas0)...)},
		{name: "operation for another kind", desired: desiredDeploy, live: scaled, patches: ops("StatefulSet", replicas0), modified: true},
		{name: "real drift elsewhere still shows", desired: desiredDeploy, live: newImage, patches: ops("Deployment", replicas0), modified: true},
		{name: "move and copy without from are skipped", desired: desiredDeploy, live: newImage,
			patches: ops("Deployment", fleet.Operation{Op: "move", Path: "/spec/x"}, fleet.Operation{Op: "copy", Path: "/spec/y"}), modified: true},
		{name: "whole-document operations do not break the comparison", desired: desiredDeploy, live: scaled,
			patches: ops("Deployment", fleet.Operation{Op: "add", Path: ""}, fleet.Operation{Op: "replace", Path: ""}, fleet.Operation{Op: "bogus", Path: "/a"}), modified: true},
		{name: "secret stringData: edited key is drift", desired: secretDesired, live: secretLive, modified: true},
		{name: "secret stringData: replace of a data key applies to both sides", desired: secretDesired, live: secretLive,
			patches: ops("Secret", dataK("replace"))},
		{name: "secret stringData: add of a data key applies to both sides", desired: secretDesired, live: secretLive,
			patches: ops("Secret", dataK("add"))},
		{name: "secret stringData: test of a data key holds on both sides", desired: secretDesired, live: secretLive,
			patches: ops("Secret", fleet.Operation{Op: "test", Path: "/data/other", Value: "c2FtZQ=="}, dataK("replace"))},
		{name: "secret stringData: remove of a data key", desired: secretDesired, live: secretLive,
			patches: ops("Secret", dataK("remove"))},
		{name: "secret stringData: replace of another key leaves the drift", desired: secretDesired, live: secretLive,
			patches: ops("Secret", fleet.Operation{Op: "replace", Path: "/data/other", Value: "eA=="}), modified: true},
		{name: "secret stringData: pointer on a data key", desired: secretDesired, live: secretLive,
			patches: pointers("/data/k")},
		{name: "secret stringData: pointer on the stringData key", desired: secretDesired, live: secretLive,
			patches: pointers("/stringData/k")},
		{name: "secret stringData: pointer on the whole stringData", desired: secretDesired, live: secretLive,
			patches: pointers("/stringData")},
		{name: "secret stringData: pointer on the whole stringData leaves data keys compared",
			desired: secret + "data: {d: ZA==}\nstringData: {k: chart-value}\n", live: secret + "data: {d: eA==, k: dXNlci12YWx1ZQ==}\n",
			patches: pointers("/stringData"), modified: true},
		{name: "secret stringData: pointer on another stringData key leaves the drift", desired: secretDesired, live: secretLive,
			patches: pointers("/stringData/other"), modified: true},
		{name: "secret stringData: remove of the stringData key", desired: secretDesired, live: secretLive,
			patches: ops("Secret", stringDataK("remove", ""))},
		{name: "secret stringData: ignore with the stringData key as path", desired: secretDesired, live: secretLive,
			patches: ops("Secret", stringDataK("ignore", ""))},
		{name: "secret stringData: replace of the stringData key", desired: secretDesired, live: secretLive,
			patches: ops("Secret", stringDataK("replace", "x"))},
		{name: "secret stringData: test of the stringData value holds as its data", desired: secretDesired, live: secretLive,
			patches: ops("Secret", fleet.Operation{Op: "test", Path: "/stringData/other", Value: "same"}, stringDataK("replace", "x"))},
		{name: "secret stringData: test of the stringData value fails on the edited key", desired: secretDesired, live: secretLive,
			patches:  ops("Secret", stringDataK("test", "chart-value"), fleet.Operation{Op: "replace", Path: "/data/k", Value: "eA=="}),
			modified: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modified, patch, err := Diff(obj(t, tt.desired), obj(t, tt.live), tt.patches)
			if err != nil {
				t.Fatal(err)
			}
			if modified != tt.modified {
				t.Fatalf("modified = %v, want %v (patch %s)", modified, tt.modified, patch)
			}
		})
	}
}
