// Package logging wires the logging flags and loggers the same way in every
// Fleet binary: controller-runtime's zap flags (--zap-log-level,
// --zap-devel, --zap-encoder, ...) on the command's pflag set, and one
// logger for controller-runtime and for klog (client-go's leader election,
// reflectors and rate-limit messages), so all of a process's output has one
// format and one level.
package logging

import (
	"flag"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Flags holds the parsed logging flags of a command.
type Flags struct {
	zap zap.Options
}

// AddFlags adds the zap flags to fs; call Setup after fs is parsed.
func AddFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{}
	gfs := flag.NewFlagSet("zap", flag.ExitOnError)
	f.zap.BindFlags(gfs)
	fs.AddGoFlagSet(gfs)
	return f
}

// Setup installs the logger the flags describe for controller-runtime and
// klog, and returns it named after the command.
func (f *Flags) Setup(name string) logr.Logger {
	log := zap.New(zap.UseFlagOptions(&f.zap))
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	return log.WithName(name)
}
