package kubesource

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestScanCounters: the scans' counts are exported as the documented
// series, and a nil registry still gives counters to count on.
func TestScanCounters(t *testing.T) {
	if n := NewScanCounters(nil); n == nil {
		t.Fatal("no counters without a registry")
	}
	reg := prometheus.NewRegistry()
	n := NewScanCounters(reg)
	n.Scans.Add(3)
	n.FullScans.Add(1)
	n.Evaluated.Add(40)
	n.Created.Add(5)
	n.Updated.Add(2)
	n.WriteErrors.Add(1)
	n.LastRevision.Store(17)
	want := `
# HELP arbiter_scan_evaluated_objects_total Objects evaluated by background scans.
# TYPE arbiter_scan_evaluated_objects_total counter
arbiter_scan_evaluated_objects_total 40
# HELP arbiter_scan_report_write_errors_total Report writes of background scans that failed (retried).
# TYPE arbiter_scan_report_write_errors_total counter
arbiter_scan_report_write_errors_total 1
# HELP arbiter_scan_report_writes_total PolicyReports and ClusterPolicyReports written by background scans, by op: create, update, delete.
# TYPE arbiter_scan_report_writes_total counter
arbiter_scan_report_writes_total{op="create"} 5
arbiter_scan_report_writes_total{op="delete"} 0
arbiter_scan_report_writes_total{op="update"} 2
# HELP arbiter_scan_revision Revision of the last background scan finished (0 before the first, or on a replica that is not the primary).
# TYPE arbiter_scan_revision gauge
arbiter_scan_revision 17
# HELP arbiter_scan_runs_total Background scans finished, by kind: full (every object) or objects (the changed ones).
# TYPE arbiter_scan_runs_total counter
arbiter_scan_runs_total{kind="full"} 1
arbiter_scan_runs_total{kind="objects"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
