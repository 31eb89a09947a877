package kubesource

import (
	"flag"
	"io"
	"log/slog"
	"os"

	"k8s.io/klog/v2"
)

// client-go's own logs (reflectors, requests) are dropped, unless KLOG_V=N
// shows them at verbosity N.
func init() {
	v := os.Getenv("KLOG_V")
	if v == "" {
		klog.SetSlogLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
		return
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", v)
}
