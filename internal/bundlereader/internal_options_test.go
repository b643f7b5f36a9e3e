package bundlereader

import (
	"reflect"
	"testing"
)

// TestFleetYAMLCannotSetNamespaceSelector proves allowedTargetNamespaceSelector,
// which only the manager may set from GitRepoRestrictions, is dropped from
// fleet.yaml (root, targets and targetCustomizations) with a warning.
func TestFleetYAMLCannotSetNamespaceSelector(t *testing.T) {
	fy, warnings, err := ParseFleetYAML([]byte(`
defaultNamespace: app
allowedTargetNamespaceSelector:
  matchLabels: {team: a}
targets:
- name: t
  allowedTargetNamespaceSelector: {}
targetCustomizations:
- name: c
  namespace: x
  allowedTargetNamespaceSelector:
    matchExpressions: [{key: k, operator: Exists}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if fy.AllowedTargetNamespaceSelector != nil || fy.Targets[0].AllowedTargetNamespaceSelector != nil ||
		fy.TargetCustomizations[0].AllowedTargetNamespaceSelector != nil {
		t.Errorf("selector kept: root %v, target %v, customization %v", fy.AllowedTargetNamespaceSelector,
			fy.Targets[0].AllowedTargetNamespaceSelector, fy.TargetCustomizations[0].AllowedTargetNamespaceSelector)
	}
	if fy.DefaultNamespace != "app" || fy.TargetCustomizations[0].TargetNamespace != "x" {
		t.Errorf("other options lost: %+v", fy.BundleDeploymentOptions)
	}
	want := []string{
		`key "allowedTargetNamespaceSelector" is internal (set from GitRepoRestrictions) and was ignored`,
		`key "targetCustomizations[0].allowedTargetNamespaceSelector" is internal (set from GitRepoRestrictions) and was ignored`,
		`key "targets[0].allowedTargetNamespaceSelector" is internal (set from GitRepoRestrictions) and was ignored`,
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q\nwant %q", warnings, want)
	}
}
