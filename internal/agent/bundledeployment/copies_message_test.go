package bundledeployment

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutMessage(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		n         int
		want      string
	}{
		{name: "short", msg: "abc", n: 5, want: "abc"},
		{name: "exact", msg: "abcde", n: 5, want: "abcde"},
		{name: "ascii", msg: "abcdef", n: 5, want: "abcde"},
		// "é" is 2 bytes, "€" 3: the cut never splits them.
		{name: "inside a 2-byte rune", msg: "abcdé", n: 5, want: "abcd"},
		{name: "after a 2-byte rune", msg: "abcéd", n: 5, want: "abcé"},
		{name: "inside a 3-byte rune", msg: "ab€cd", n: 4, want: "ab"},
		{name: "at the limit", msg: strings.Repeat("€", 400), n: maxCopiesMessage, want: strings.Repeat("€", 341)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cutMessage(tc.msg, tc.n)
			if got != tc.want || !utf8.ValidString(got) || len(got) > tc.n {
				t.Fatalf("cutMessage(%q, %d) = %q, want %q", tc.msg, tc.n, got, tc.want)
			}
		})
	}
}
