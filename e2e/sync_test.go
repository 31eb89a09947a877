package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// randomChanges applies n random changes (policies, exceptions, Namespaces
// upserted and deleted) to p in batches of 1–8, and returns the number of
// write batches.
func randomChanges(t testing.TB, p *proc, rng *rand.Rand, n int) int {
	t.Helper()
	live := map[string]*arbiterv1.Change{}
	batches := 0
	for done := 0; done < n; {
		size := 1 + rng.IntN(8)
		var changes []*arbiterv1.Change
		seen := map[string]bool{}
		for i := 0; i < size && done < n; i++ {
			var key string
			var c *arbiterv1.Change
			switch rng.IntN(3) {
			case 0:
				name := fmt.Sprintf("policy-%d", rng.IntN(20))
				key, c = "p/"+name, upsert(policy(name, fmt.Sprintf("bad%d", rng.IntN(5))))
			case 1:
				name := fmt.Sprintf("exception-%d", rng.IntN(40))
				key, c = "e/"+name, upsert(exception(name, fmt.Sprintf("policy-%d", rng.IntN(20)), fmt.Sprintf("bad%d-pod", rng.IntN(5))))
			default:
				name := fmt.Sprintf("ns-%d", rng.IntN(20))
				key, c = "n/"+name, upsert(namespace(name, map[string]any{"v": fmt.Sprint(rng.IntN(3))}))
			}
			if rng.IntN(4) == 0 {
				// delete something live instead
				for k := range live {
					key = k
					break
				}
				if key != "" && live[key] != nil {
					parts := strings.SplitN(key, "/", 2)
					switch parts[0] {
					case "p":
						c = del("policies.kyverno.io", "ValidatingPolicy", "", parts[1])
					case "e":
						c = del("policies.kyverno.io", "PolicyException", "exceptions", parts[1])
					case "n":
						c = del("", "Namespace", "", parts[1])
					}
				}
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			if c.GetOp() == arbiterv1.ChangeOp_CHANGE_OP_DELETE {
				delete(live, key)
			} else {
				live[key] = c
			}
			changes = append(changes, c)
			done++
		}
		if len(changes) == 0 {
			continue
		}
		write(t, p, changes...)
		batches++
	}
	return batches
}

// decisions returns each replica's decisions on a set of pods, rendered.
func decisions(t testing.TB, p *proc, minRevision uint64) []string {
	t.Helper()
	var out []string
	for i := 0; i < 5; i++ {
		for j := 0; j < 5; j++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := p.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: podJSON(fmt.Sprintf("bad%d-pod-%d", i, j)), MinRevision: minRevision})
			cancel()
			if err != nil {
				t.Fatalf("%s decide: %v", p.name, err)
			}
			var rs []string
			for _, r := range resp.GetResults() {
				rs = append(rs, r.GetPolicy()+"/"+r.GetRule()+"="+r.GetResult()+":"+r.GetMessage())
			}
			out = append(out, fmt.Sprintf("%d %v %v", resp.GetRevision(), resp.GetAllowed(), rs))
		}
	}
	return out
}

// 1. Three replicas converge to the same revision and digest after a burst
// of 1,000 random changes, and decide alike.
func TestConvergeAfterBurst(t *testing.T) {
	primary := startPrimary(t)
	f1 := startFollower(t, "follower-1", primary)
	f2 := startFollower(t, "follower-2", primary)
	rng := rand.New(rand.NewPCG(1, 2))
	randomChanges(t, primary, rng, 1000)
	rev, digest := waitConverged(t, 30*time.Second, primary, f1, f2)
	if rev < 100 {
		t.Fatalf("only %d revisions for 1,000 changes", rev)
	}
	want := decisions(t, primary, rev)
	for _, f := range []*proc{f1, f2} {
		got := decisions(t, f, rev)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s decides differently at revision %d (%s):\n%s\nvs primary:\n%s", f.name, rev, digest, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// 2. A follower killed with SIGKILL mid-stream restarts, resumes from its
// own revision and converges.
func TestFollowerKilledResumes(t *testing.T) {
	primary := startPrimary(t)
	f := startFollower(t, "follower", primary)
	rng := rand.New(rand.NewPCG(3, 4))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				randomChanges(t, primary, rng, 10)
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	f.stop(syscall.SIGKILL)
	killedAt := time.Now()
	time.Sleep(200 * time.Millisecond)
	f.restart()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	waitConverged(t, 30*time.Second, primary, f)
	// It resumed from its own revision: no snapshot was needed after restart.
	logAfter := f.log.String()
	if strings.Contains(logAfter, "snapshot installed") {
		t.Fatalf("the restarted follower took a snapshot instead of resuming:\n%s", tail(logAfter, 20))
	}
	if !strings.Contains(logAfter, "following") || strings.Contains(logAfter, "from=0 ") {
		t.Fatalf("the restarted follower did not resume from its revision:\n%s", tail(logAfter, 20))
	}
	_ = killedAt
}

// 3. A follower that fell behind a compaction receives a snapshot and converges.
func TestFollowerBehindCompactionGetsSnapshot(t *testing.T) {
	primary := startPrimary(t, "--keep-revisions", "5")
	f := startFollower(t, "follower", primary)
	rng := rand.New(rand.NewPCG(5, 6))
	randomChanges(t, primary, rng, 20)
	waitConverged(t, 20*time.Second, primary, f)
	f.stop(syscall.SIGTERM)
	randomChanges(t, primary, rng, 60)
	f.restart()
	waitConverged(t, 20*time.Second, primary, f)
	if !strings.Contains(f.log.String(), "snapshot installed") {
		t.Fatalf("follower converged without a snapshot:\n%s", tail(f.log.String(), 20))
	}
}

// 4. Kyverno #16989: a policy, then at once an exception for it; every
// replica asked with min_revision = the exception's revision applies it.
func TestExceptionVisibleAtItsRevisionOnEveryReplica(t *testing.T) {
	primary := startPrimary(t)
	followers := []*proc{startFollower(t, "follower-1", primary), startFollower(t, "follower-2", primary)}
	replicas := append([]*proc{primary}, followers...)
	misses := 0
	for i := 0; i < 200; i++ {
		pname := fmt.Sprintf("p%d", i)
		write(t, primary, upsert(policy(pname, "blocked")))
		ack := write(t, primary, upsert(exception(fmt.Sprintf("e%d", i), pname, "blocked-pod")))
		for _, r := range replicas {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := r.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: podJSON("blocked-pod"), MinRevision: ack.GetRevision()})
			cancel()
			if err != nil {
				t.Fatalf("round %d %s: %v", i, r.name, err)
			}
			if resp.GetRevision() < ack.GetRevision() {
				t.Fatalf("round %d %s decided at %d < min_revision %d", i, r.name, resp.GetRevision(), ack.GetRevision())
			}
			for _, res := range resp.GetResults() {
				if res.GetPolicy() == pname && (res.GetRule() != "exception" || res.GetResult() != "skip") {
					misses++
					t.Errorf("round %d %s: %s = %s %q (exception missed)", i, r.name, pname, res.GetResult(), res.GetMessage())
				}
			}
		}
		// Keep the set small: remove this round's objects.
		write(t, primary, del("policies.kyverno.io", "ValidatingPolicy", "", pname), del("policies.kyverno.io", "PolicyException", "exceptions", fmt.Sprintf("e%d", i)))
	}
	if misses != 0 {
		t.Fatalf("%d misses", misses)
	}
}

// 5. The primary killed with SIGKILL during a write burst: on restart no
// revision is half-applied and every revision it acknowledged is there.
func TestPrimaryKilledKeepsAckedRevisions(t *testing.T) {
	primary := startPrimary(t)
	var acked atomic.Uint64
	ackedNames := sync.Map{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("burst-%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			// Two objects per revision: a policy and its exception.
			ack, err := primary.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
				upsert(policy(name, "x")), upsert(exception(name, name, "x-pod")),
			}})
			cancel()
			if err != nil {
				return
			}
			acked.Store(ack.GetRevision())
			ackedNames.Store(name, ack.GetRevision())
		}
	}()
	time.Sleep(500 * time.Millisecond)
	primary.stop(syscall.SIGKILL)
	close(stop)
	<-done
	last := acked.Load()
	if last == 0 {
		t.Fatal("no write was acknowledged before the kill")
	}
	primary.restart()
	st := primary.status()
	if st.GetRevision() < last {
		t.Fatalf("restarted at revision %d, below the acknowledged %d", st.GetRevision(), last)
	}
	// Whole revisions only: every policy has its exception and vice versa.
	if st.GetPolicies() != st.GetExceptions() {
		t.Fatalf("half-applied revision: %d policies, %d exceptions", st.GetPolicies(), st.GetExceptions())
	}
	if uint64(st.GetPolicies()) < last {
		t.Fatalf("%d policies for %d acknowledged revisions", st.GetPolicies(), last)
	}
	// Every acknowledged object decides as committed.
	ackedNames.Range(func(k, v any) bool {
		name := k.(string)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := primary.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: podJSON("x-pod")})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range resp.GetResults() {
			if r.GetPolicy() == name && r.GetRule() == "exception" {
				found = true
			}
		}
		if !found {
			t.Errorf("acknowledged %s (revision %d) is missing after restart", name, v)
		}
		return !t.Failed()
	})
}

// 6. A batch with one bad object is refused whole and the revision does
// not move.
func TestBadBatchRefusedWhole(t *testing.T) {
	primary := startPrimary(t)
	write(t, primary, upsert(policy("good", "x")))
	before := primary.status()
	bad := policy("bad", "y")
	bad["spec"].(map[string]any)["validations"] = []any{map[string]any{"expression": "object.metadata.name.startsWith("}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := primary.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		upsert(exception("e", "good", "x-pod")), upsert(bad),
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ValidatingPolicy bad") || !strings.Contains(err.Error(), "spec.validations[0].expression") {
		t.Fatalf("bad batch: %v", err)
	}
	after := primary.status()
	if after.GetRevision() != before.GetRevision() || after.GetDigest() != before.GetDigest() || after.GetExceptions() != 0 {
		t.Fatalf("store moved: %v -> %v", before, after)
	}
}
