package version

import (
	"os"
	"strings"
	"testing"
)

// TestBuildTagsEverywhere: the Makefile and the Dockerfile build with the
// same tags as the Go code that builds binaries, so a change in one place
// cannot silently leave the others behind.
func TestBuildTagsEverywhere(t *testing.T) {
	for _, f := range []string{"../../Makefile", "../../build/Dockerfile"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), BuildTags) {
			t.Errorf("%s does not build with the tags %q", f, BuildTags)
		}
	}
}
