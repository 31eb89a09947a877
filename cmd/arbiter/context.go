package main

import (
	"context"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/arbiter-pdp/arbiter/apply"
	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/kubesource"
)

// addContextFlags adds apply's and decide's --context, --cluster and
// --kubeconfig.
func addContextFlags(f *pflag.FlagSet, o *apply.ContextOptions) {
	f.StringArrayVar(&o.Files, "context", nil, "file or folder of what policies read (resource.Get/List, globalContext): context objects, GlobalContextEntries, Kyverno CLI context files (repeatable)")
	f.BoolVar(&o.Cluster, "cluster", false, "read what policies read with resource.Get/List from a live API server, read-only")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "with --cluster: kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
}

func init() {
	apply.ClusterReader = func(_ context.Context, kubeconfig string) (clusterdata.Reader, error) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if kubeconfig != "" {
			rules.ExplicitPath = kubeconfig
		}
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, err
		}
		rc.UserAgent = "arbiter/" + version()
		return kubesource.NewLiveReader(rc)
	}
}
