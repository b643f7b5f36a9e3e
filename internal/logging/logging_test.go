package logging

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestAddFlags: the zap flags are accepted by the command's flag set, and
// a bad level is refused by the parser instead of being ignored.
func TestAddFlags(t *testing.T) {
	fs := pflag.NewFlagSet("cmd", pflag.ContinueOnError)
	f := AddFlags(fs)
	if err := fs.Parse([]string{"--zap-log-level=debug", "--zap-encoder=console"}); err != nil {
		t.Fatal(err)
	}
	if f.zap.Level == nil || !f.zap.Level.Enabled(-1) {
		t.Fatalf("debug level not set: %+v", f.zap.Level)
	}
	if log := f.Setup("cmd"); !log.V(1).Enabled() {
		t.Fatal("logger does not log at debug level")
	}

	bad := pflag.NewFlagSet("cmd", pflag.ContinueOnError)
	AddFlags(bad)
	if err := bad.Parse([]string{"--zap-log-level=loud"}); err == nil {
		t.Fatal("a bad level was accepted")
	}
}
