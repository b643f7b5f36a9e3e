package content

import (
	"fmt"
	"testing"
)

func TestDesiredRules(t *testing.T) {
	cases := []struct {
		name     string
		contents []string
		want     string
	}{
		{"none gives no rule (empty resourceNames would allow all)", nil, "[]"},
		{"sorted and deduplicated", []string{"s-b", "s-a", "s-b"}, "[get] [contents] [s-a s-b]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rules := DesiredRules(c.contents)
			got := "[]"
			if len(rules) == 1 {
				got = fmt.Sprintf("%v %v %v", rules[0].Verbs, rules[0].Resources, rules[0].ResourceNames)
			}
			if len(rules) > 1 || got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
	if !rulesEqual(DesiredRules([]string{"x"}), DesiredRules([]string{"x", "x"})) || rulesEqual(DesiredRules([]string{"x"}), nil) {
		t.Fatal("rulesEqual")
	}
}
