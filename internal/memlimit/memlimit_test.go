package memlimit

import "testing"

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1073741824\n", 1 << 30, true},
		{"max\n", 0, false},
		{"9223372036854771712\n", 0, false}, // cgroup v1 "unlimited"
		{"", 0, false},
		{"0", 0, false},
		{"-1", 0, false},
		{"lots", 0, false},
	} {
		got, ok := ParseLimit(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
