package registration

import "testing"

// TestValuesCurrentAPIServer: a token's values Secret is kept only while
// it carries the manager's apiServerURL and apiServerCA; a manager
// restarted with another URL, or a rotated CA, writes it again, so that
// agents installed from it (and imported ones) reach it where it now is.
func TestValuesCurrentAPIServer(t *testing.T) {
	r := &TokenReconciler{reconcilerBase: reconcilerBase{Opts: Options{APIServerURL: "https://new:6443", APIServerCA: []byte("new ca")}}}
	for _, tc := range []struct {
		name, values string
		want         bool
	}{
		{name: "the manager's", values: "apiServerURL: https://new:6443\napiServerCA: new ca\ntoken: t\n", want: true},
		{name: "another URL", values: "apiServerURL: https://old:6443\napiServerCA: new ca\ntoken: t\n"},
		{name: "another CA", values: "apiServerURL: https://new:6443\napiServerCA: old ca\ntoken: t\n"},
		{name: "no URL", values: "apiServerCA: new ca\ntoken: t\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.valuesCurrent([]byte(tc.values)); got != tc.want {
				t.Fatalf("valuesCurrent(%q) = %v, want %v", tc.values, got, tc.want)
			}
		})
	}
}
