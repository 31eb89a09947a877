package main

import (
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/arbiter-pdp/arbiter/kubesource"
)

// The background scan flags: on by default (as Kyverno's
// --backgroundScan), the interval and write limits passed on, off with
// --kube-background-scan=false, and non-positive values refused.
func TestBackgroundScanFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    *kubesource.ReportsConfig
		wantErr bool
	}{
		{nil, &kubesource.ReportsConfig{Interval: time.Hour, QPS: 300, Workers: 16}, false},
		{[]string{"--kube-scan-interval", "5m", "--kube-report-qps", "50", "--kube-report-workers", "4"}, &kubesource.ReportsConfig{Interval: 5 * time.Minute, QPS: 50, Workers: 4}, false},
		{[]string{"--kube-background-scan=false"}, nil, false},
		{[]string{"--kube-scan-interval", "0s"}, nil, true},
		{[]string{"--kube-report-qps", "-1"}, nil, true},
	}
	for _, tt := range tests {
		var o kubeOptions
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addKubeFlags(fs, &o)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		var src kubesource.Config
		err := o.clusterConfig(&src)
		if (err != nil) != tt.wantErr {
			t.Errorf("%v: err %v", tt.args, err)
			continue
		}
		if tt.wantErr {
			continue
		}
		if (src.Reports == nil) != (tt.want == nil) || (src.Reports != nil && *src.Reports != *tt.want) {
			t.Errorf("%v: reports %+v, want %+v", tt.args, src.Reports, tt.want)
		}
	}
}
