package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/arbiter-pdp/arbiter/kubesource"
	"github.com/arbiter-pdp/arbiter/server"
)

// kubeOptions are serve's Kubernetes source flags.
type kubeOptions struct {
	enabled        bool
	kubeconfig     string
	leaseName      string
	leaseNamespace string
	advertise      string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	resync         time.Duration
	// What the source stores as context objects (kubesource/context.go).
	contextResources []string
	commitInterval   time.Duration

	// What the primary writes back (cluster.go of kubesource).
	policyStatus      bool
	reportsUser       string
	webhooks          string
	webhookName       string
	webhookService    string
	webhookURL        string
	webhookCAFile     string
	webhookExclude    []string
	webhookNSSelector string
	webhookAnnotation []string

	// DeletingPolicies (cleanup.go of kubesource).
	cleanup          bool
	cleanupDryRun    bool
	cleanupExcludeNS []string
	// Background scans into PolicyReports (reports.go of kubesource).
	backgroundScan bool
	scanInterval   time.Duration
	reportQPS      float32
	reportWorkers  int
	// Mutate-existing MutatingPolicies (mutateexisting.go of kubesource).
	mutateExisting        bool
	mutateExistingQueue   int
	mutateExistingWorkers int
	mutateExistingExclude []string
}

func addKubeFlags(f *pflag.FlagSet, o *kubeOptions) {
	f.BoolVar(&o.enabled, "kube-source", false, "feed the store from the Kubernetes API server: policies, exceptions, ValidatingAdmissionPolicies and bindings, Namespaces, params, GlobalContextEntries (and their apiCall data) and the objects the policies read (replicas elect their primary with --lease-name)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "--kube-source: kubeconfig of the API server (default: in-cluster configuration)")
	f.StringVar(&o.leaseName, "lease-name", "arbiter-primary", `--kube-source: the Lease that elects the primary among replicas ("": no election, this replica is the primary)`)
	f.StringVar(&o.leaseNamespace, "lease-namespace", "", "--kube-source: namespace of the Lease (default $POD_NAMESPACE, the pod's namespace in-cluster, else default)")
	f.StringVar(&o.advertise, "advertise-address", "", "--kube-source: gRPC address followers reach this replica at, carried in the Lease (default --listen, its host $POD_IP when it listens on every address)")
	f.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "--kube-source: how long a Lease lasts without renewal (failover takes about this long)")
	f.DurationVar(&o.renewDeadline, "lease-renew-deadline", 10*time.Second, "--kube-source: a primary that cannot renew its Lease for this long steps down (less than --lease-duration)")
	f.DurationVar(&o.retryPeriod, "lease-retry-period", 2*time.Second, "--kube-source: how often the Lease is tried and renewed")
	f.DurationVar(&o.resync, "kube-resync", 10*time.Minute, "--kube-source: how often the whole store is compared with the cluster")
	f.StringSliceVar(&o.contextResources, "kube-context-resources", nil, "--kube-source: resources stored as context objects (APIVERSION/RESOURCE, e.g. v1/configmaps,apps/v1/deployments) for the resource.Get/List calls whose apiVersion and resource are not constants; the kinds policies name with constants and the GlobalContextEntries' kubernetesResource are watched without it (grant list/watch on each: docs/operations.md)")
	f.DurationVar(&o.commitInterval, "kube-commit-interval", 100*time.Millisecond, "--kube-source: the shortest time between two revisions the source commits; cluster changes arriving meanwhile are gathered into the next (at most one revision per interval)")
	f.BoolVar(&o.policyStatus, "kube-policy-status", true, "--kube-source: the primary writes the status of the ValidatingPolicies and MutatingPolicies (and their namespaced kinds) as Kyverno does: status.conditionStatus with WebhookConfigured and RBACPermissionsGranted, ready, and the revision that holds the policy")
	f.StringVar(&o.reportsUser, "kube-reports-user", "", "--kube-source: the user whose get/list/watch permissions on the policies' resources the RBACPermissionsGranted condition checks (SubjectAccessReviews, as Kyverno checks its reports controller's service account); default: Arbiter's own credentials (SelfSubjectAccessReviews)")
	f.StringVar(&o.webhooks, "kube-webhooks", "static", `--kube-source: "static": the webhook configurations of deploy/ send every request to the shim; "managed": the primary keeps a Validating- and a MutatingWebhookConfiguration (--kube-webhook-name) whose webhooks are made from the policies' matchConstraints, as Kyverno does`)
	f.StringVar(&o.webhookName, "kube-webhook-name", kubesource.DefaultWebhookConfigName, "--kube-webhooks managed: the name of the ValidatingWebhookConfiguration and the MutatingWebhookConfiguration")
	f.StringVar(&o.webhookService, "kube-webhook-service", "", "--kube-webhooks managed: the shim's Service, NAMESPACE/NAME[:PORT] (default $POD_NAMESPACE/arbiter-webhook:443); the webhooks call its /validate and /mutate")
	f.StringVar(&o.webhookURL, "kube-webhook-url", "", "--kube-webhooks managed: the shim's base URL (https://HOST[:PORT][/PREFIX]) instead of a Service; /validate and /mutate are appended")
	f.StringVar(&o.webhookCAFile, "kube-webhook-ca-file", "", "--kube-webhooks managed: PEM CA bundle that verifies the shim's certificate, written into the configurations (re-read at every update); without it the caBundle they hold is kept (for a CA injector)")
	f.StringSliceVar(&o.webhookExclude, "kube-webhook-exclude-namespaces", nil, "--kube-webhooks managed: namespaces no webhook is called for (default kube-system and $POD_NAMESPACE, Arbiter's own, as Kyverno excludes kube-system and its namespace)")
	f.StringVar(&o.webhookNSSelector, "kube-webhook-namespace-selector", "", "--kube-webhooks managed: a label selector (env=prod,tier!=dev) every webhook's namespaceSelector also requires")
	f.BoolVar(&o.cleanup, "kube-cleanup", false, "--kube-source: the primary runs the DeletingPolicies and NamespacedDeletingPolicies on their schedule and deletes what they select, as Kyverno's cleanup controller does (off by default: do not run it beside Kyverno's); the policies are stored and listed either way")
	f.BoolVar(&o.cleanupDryRun, "kube-cleanup-dry-run", false, "--kube-cleanup: delete nothing; log and record (PolicyDryRun Events) what every policy would delete (a policy annotated cleanup.arbiter.dev/dry-run=true runs dry on its own)")
	f.StringSliceVar(&o.cleanupExcludeNS, "kube-cleanup-exclude-namespaces", kubesource.DefaultCleanupExcludeNamespaces, "--kube-cleanup: namespaces no DeletingPolicy deletes in (Kyverno's default resourceFilters); give an empty value for none")
	f.BoolVar(&o.backgroundScan, "kube-background-scan", true, "--kube-source: the primary evaluates the policies whose background evaluation is enabled against the existing objects of the kinds they match and writes the results as wgpolicyk8s.io/v1alpha2 PolicyReports and ClusterPolicyReports, one per object, as Kyverno's reports controller does (needs the PolicyReport CRDs)")
	f.DurationVar(&o.scanInterval, "kube-scan-interval", time.Hour, "--kube-background-scan: how often every object is scanned again (besides every policy, exception or Namespace change, exception expiry and object change)")
	f.Float32Var(&o.reportQPS, "kube-report-qps", 300, "--kube-background-scan: report writes per second to the API server (burst as many)")
	f.IntVar(&o.reportWorkers, "kube-report-workers", 16, "--kube-background-scan: report writes in flight")
	f.BoolVar(&o.mutateExisting, "kube-mutate-existing", true, "--kube-source: accept MutatingPolicies with evaluation.mutateExisting.enabled (and targetMatchConstraints): an admission request (through the webhook shim) that sets one off queues it on the replica that answered, which then updates the targets through the API server (grant get, list and update on the target kinds: docs/operations.md); false: such policies are refused")
	f.IntVar(&o.mutateExistingQueue, "kube-mutate-existing-queue", 1024, "--kube-mutate-existing: admission requests waiting at most to update their targets (a request arriving when it is full is dropped, logged and counted)")
	f.StringSliceVar(&o.mutateExistingExclude, "kube-mutate-existing-exclude-namespaces", kubesource.DefaultCleanupExcludeNamespaces, "--kube-mutate-existing: namespaces whose objects (and the Namespaces of those names) are never targets (Kyverno's default resourceFilters); give an empty value for none")
	f.IntVar(&o.mutateExistingWorkers, "kube-mutate-existing-workers", 2, "--kube-mutate-existing: admission requests whose targets are updated at once")
	f.StringArrayVar(&o.webhookAnnotation, "kube-webhook-annotation", nil, "--kube-webhooks managed: KEY=VALUE annotation of the configurations (repeatable), e.g. cert-manager.io/inject-ca-from=NS/CERTIFICATE")
}

// clusterConfig is what the primary writes back, from the flags.
func (k *kubeOptions) clusterConfig(src *kubesource.Config) error {
	if k.policyStatus {
		src.Status = &kubesource.StatusConfig{ReportsUser: k.reportsUser}
	}
	if k.backgroundScan {
		if k.scanInterval <= 0 || k.reportQPS <= 0 || k.reportWorkers <= 0 {
			return exitWith(exitLoad, "--kube-scan-interval, --kube-report-qps and --kube-report-workers must be positive")
		}
		src.Reports = &kubesource.ReportsConfig{Interval: k.scanInterval, QPS: k.reportQPS, Workers: k.reportWorkers}
	}
	managedOnly := k.webhookService != "" || k.webhookURL != "" || k.webhookCAFile != "" || k.webhookExclude != nil ||
		k.webhookNSSelector != "" || k.webhookAnnotation != nil || k.webhookName != kubesource.DefaultWebhookConfigName
	switch k.webhooks {
	case "static":
		if managedOnly {
			return exitWith(exitLoad, "--kube-webhook-* flags apply to --kube-webhooks managed")
		}
		return nil
	case "managed":
	default:
		return exitWith(exitLoad, "--kube-webhooks %q: want static or managed", k.webhooks)
	}
	ns := podNamespace()
	w := &kubesource.WebhookConfig{Name: k.webhookName, URL: k.webhookURL, CAFile: k.webhookCAFile}
	if k.webhookURL != "" && k.webhookService != "" {
		return exitWith(exitLoad, "--kube-webhook-url and --kube-webhook-service contradict each other")
	}
	if k.webhookURL != "" {
		u, err := url.Parse(k.webhookURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return exitWith(exitLoad, "--kube-webhook-url %q: want https://HOST[:PORT][/PREFIX] (the API server calls webhooks over TLS only, without query or fragment)", k.webhookURL)
		}
	} else {
		svc := k.webhookService
		if svc == "" {
			svc = ns + "/arbiter-webhook"
		}
		ref, err := parseServiceRef(svc)
		if err != nil {
			return exitWith(exitLoad, "--kube-webhook-service: %v", err)
		}
		w.Service = ref
	}
	exclude := k.webhookExclude
	if exclude == nil {
		exclude = []string{"kube-system", ns}
	}
	w.NamespaceSelector = kubesource.DefaultNamespaceSelector(exclude...)
	if k.webhookNSSelector != "" {
		sel, err := metav1.ParseToLabelSelector(k.webhookNSSelector)
		if err != nil {
			return exitWith(exitLoad, "--kube-webhook-namespace-selector: %v", err)
		}
		if w.NamespaceSelector == nil {
			w.NamespaceSelector = &metav1.LabelSelector{}
		}
		if len(sel.MatchLabels) > 0 {
			w.NamespaceSelector.MatchLabels = sel.MatchLabels
		}
		w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions, sel.MatchExpressions...)
	}
	for _, a := range k.webhookAnnotation {
		key, value, ok := strings.Cut(a, "=")
		if !ok || key == "" {
			return exitWith(exitLoad, "--kube-webhook-annotation %q: want KEY=VALUE", a)
		}
		if w.Annotations == nil {
			w.Annotations = map[string]string{}
		}
		w.Annotations[key] = value
	}
	src.Webhooks = w
	return nil
}

// metricsRegisterer is the server's registry, nil without --metrics-listen.
func metricsRegisterer(srv *server.Server) prometheus.Registerer {
	if r := srv.MetricsRegistry(); r != nil {
		return r
	}
	return nil
}

// parseServiceRef reads NAMESPACE/NAME[:PORT].
func parseServiceRef(s string) (kubesource.ServiceRef, error) {
	ns, rest, ok := strings.Cut(s, "/")
	if !ok || ns == "" || rest == "" {
		return kubesource.ServiceRef{}, fmt.Errorf("%q: want NAMESPACE/NAME[:PORT]", s)
	}
	ref := kubesource.ServiceRef{Namespace: ns, Name: rest, Port: 443}
	if name, port, ok := strings.Cut(rest, ":"); ok {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 || name == "" {
			return kubesource.ServiceRef{}, fmt.Errorf("%q: want NAMESPACE/NAME[:PORT]", s)
		}
		ref.Name, ref.Port = name, int32(p)
	}
	return ref, nil
}

// startKube is serve's hook for --kube-source, called after server.New and
// before the server takes calls: with an election the replica starts as a
// standby and RunHA makes it the primary or a follower; without one it is
// the primary and the source runs at once. Both stop, and the Lease is
// released, at the start of srv.Shutdown.
func startKube(srv *server.Server, o *serveOptions, listen string, log *slog.Logger) error {
	k := &o.kube
	if !k.enabled {
		if k.kubeconfig != "" || k.advertise != "" {
			return exitWith(exitLoad, "--kubeconfig and --advertise-address apply to --kube-source")
		}
		if k.webhooks != "static" || k.reportsUser != "" {
			return exitWith(exitLoad, "--kube-webhooks and --kube-reports-user apply to --kube-source")
		}
		if k.cleanup || k.cleanupDryRun {
			return exitWith(exitLoad, "--kube-cleanup and --kube-cleanup-dry-run apply to --kube-source")
		}
		if len(k.contextResources) > 0 {
			return exitWith(exitLoad, "--kube-context-resources applies to --kube-source")
		}
		return nil
	}
	switch {
	case o.follow != "":
		return exitWith(exitLoad, "--kube-source and --follow contradict each other: with --kube-source the replicas elect their primary (--lease-name); without an election give only --kube-source")
	case len(o.load) > 0:
		return exitWith(exitLoad, "--load and --kube-source contradict each other: the cluster is the source of the store's policies")
	}
	klog.SetSlogLogger(log.With("component", "client-go")) // client-go's logs as the server's
	rc, err := kubeRestConfig(k.kubeconfig)
	if err != nil {
		return exitWith(exitLoad, "--kube-source: %v", err)
	}
	refs, err := kubesource.ParseContextResources(k.contextResources)
	if err != nil {
		return exitWith(exitLoad, "--kube-context-resources: %v", err)
	}
	if k.commitInterval < 0 {
		return exitWith(exitLoad, "--kube-commit-interval: %s is negative", k.commitInterval)
	}
	src := kubesource.Config{Rest: rc, Logger: log, Resync: k.resync, ContextResources: refs, CommitInterval: k.commitInterval,
		StoreSecrets: o.storeSecrets}
	if o.calloutClient != nil {
		src.APICall.Service = o.calloutClient
	}
	if err := k.clusterConfig(&src); err != nil {
		return err
	}
	if src.Reports != nil {
		src.Reports.Counters = kubesource.NewScanCounters(metricsRegisterer(srv))
	}
	switch {
	case k.cleanup:
		exclude := []string{}
		for _, ns := range k.cleanupExcludeNS {
			if ns != "" {
				exclude = append(exclude, ns)
			}
		}
		src.Cleanup = &kubesource.CleanupConfig{DryRun: k.cleanupDryRun, ExcludeNamespaces: exclude,
			Metrics: kubesource.NewCleanupMetrics(metricsRegisterer(srv))}
		log.Info("DeletingPolicies run by the primary", "dry_run", k.cleanupDryRun, "exclude_namespaces", exclude)
	case k.cleanupDryRun:
		return exitWith(exitLoad, "--kube-cleanup-dry-run applies to --kube-cleanup")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	mutatorDone := make(chan struct{})
	if k.mutateExisting {
		if k.mutateExistingQueue <= 0 || k.mutateExistingWorkers <= 0 {
			cancel()
			return exitWith(exitLoad, "--kube-mutate-existing-queue and --kube-mutate-existing-workers must be positive")
		}
		exclude := []string{}
		for _, ns := range k.mutateExistingExclude {
			if ns != "" {
				exclude = append(exclude, ns)
			}
		}
		m, err := kubesource.NewMutator(src, kubesource.MutateExistingConfig{Logger: log, QueueSize: k.mutateExistingQueue,
			Workers: k.mutateExistingWorkers, ExcludeNamespaces: exclude,
			Metrics: kubesource.NewMutateExistingMetrics(metricsRegisterer(srv))}, srv.Current)
		if err != nil {
			cancel()
			return exitWith(exitLoad, "--kube-source: %v", err)
		}
		srv.SetMutateExisting(m)
		go func() {
			defer close(mutatorDone)
			m.Run(ctx)
		}()
	} else {
		close(mutatorDone)
	}
	if k.leaseName == "" {
		s, err := kubesource.New(src, srv)
		if err != nil {
			cancel()
			return exitWith(exitLoad, "--kube-source: %v", err)
		}
		go func() {
			defer close(done)
			_ = s.Run(ctx)
		}()
		log.Info("Kubernetes source on, without election: this replica is the primary")
	} else {
		addr, err := advertiseAddress(k.advertise, listen)
		if err != nil {
			cancel()
			return err
		}
		opts, err := kubeFollowDialOptions(o, addr, log)
		if err != nil {
			cancel()
			return err
		}
		srv.AddFollowDialOptions(opts...)
		ns := k.leaseNamespace
		if ns == "" {
			ns = podNamespace()
		}
		cfg := kubesource.HAConfig{Source: src, LeaseName: k.leaseName, LeaseNamespace: ns, Address: addr,
			LeaseDuration: k.leaseDuration, RenewDeadline: k.renewDeadline, RetryPeriod: k.retryPeriod}
		srv.Standby()
		go func() {
			defer close(done)
			if err := kubesource.RunHA(ctx, srv, cfg); err != nil {
				log.Error("Kubernetes source", "err", err)
			}
		}()
		log.Info("Kubernetes source on, primary elected with a Lease", "lease", ns+"/"+k.leaseName, "advertise", addr)
	}
	srv.OnShutdown(func(sctx context.Context) {
		srv.SetMutateExisting(nil)
		cancel()
		for _, ch := range []chan struct{}{done, mutatorDone} {
			select {
			case <-ch:
			case <-sctx.Done():
			}
		}
	})
	return nil
}

func kubeRestConfig(kubeconfig string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "arbiter/" + version()
	return rc, nil
}

// advertiseAddress is --advertise-address, or the listen address (with
// $POD_IP for its host when it listens on every address).
func advertiseAddress(flag, listen string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", exitWith(exitLoad, "--advertise-address: %v", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		pod := os.Getenv("POD_IP")
		if pod == "" {
			return "", exitWith(exitLoad, "--kube-source: the replica listens on every address (%s): give --advertise-address (the address followers reach it at), or set POD_IP", listen)
		}
		return net.JoinHostPort(pod, port), nil
	}
	return listen, nil
}

// podNamespace is the Lease's default namespace.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// kubeFollowDialOptions are how a replica reaches the primaries the Lease
// names, from the --follow-* flags (the same rules as --follow).
func kubeFollowDialOptions(o *serveOptions, advertise string, log *slog.Logger) ([]grpc.DialOption, error) {
	opts, err := securityConfig(o).FollowDialOptions(advertise, log)
	var pe *server.PlaintextFollowError
	if errors.As(err, &pe) {
		return nil, exitWith(exitLoad, "--kube-source: replicas would follow each other over plaintext at %s, which is not a loopback address; serve with TLS (--tls-cert, and --follow-ca-file), or --insecure", advertise)
	}
	if err != nil {
		return nil, exitWith(exitLoad, "%v", err)
	}
	return opts, nil
}
