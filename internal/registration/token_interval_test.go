package registration

import (
	"testing"
	"time"
)

// TestValuesCurrent: a token's values Secret is kept only while it carries
// the manager's current agentCheckinInterval; values written before the
// interval was carried, or under another one, are written again, so that
// agents installed from them follow the manager.
func TestValuesCurrent(t *testing.T) {
	r := &TokenReconciler{reconcilerBase: reconcilerBase{Opts: Options{AgentCheckinInterval: 5 * time.Minute}}}
	for _, tc := range []struct {
		name, values string
		want         bool
	}{
		{name: "same interval", values: "token: t\ninternal:\n  checkinInterval: 5m0s\n", want: true},
		{name: "another interval", values: "token: t\ninternal:\n  checkinInterval: 15m0s\n"},
		{name: "written before the interval was carried", values: "token: t\n"},
		{name: "empty", values: ""},
		{name: "not YAML", values: "{"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.valuesCurrent([]byte(tc.values)); got != tc.want {
				t.Fatalf("valuesCurrent(%q) = %v, want %v", tc.values, got, tc.want)
			}
		})
	}
}
