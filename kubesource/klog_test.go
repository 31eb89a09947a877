package kubesource

import (
	"flag"
	"os"

	"k8s.io/klog/v2"
)

// KLOG_V=N shows client-go's own logs (reflectors, requests) at verbosity N.
func init() {
	if v := os.Getenv("KLOG_V"); v != "" {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("v", v)
	}
}
