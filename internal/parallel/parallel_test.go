package parallel

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
)

func TestForCallsEveryIndexOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, n := range []int{0, 1, 2, 7, 1000} {
		for _, grain := range []int{0, 1, 16} {
			counts := make([]atomic.Int32, n)
			ForGrain(n, grain, func(i int) { counts[i].Add(1) })
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Fatalf("n=%d grain=%d: index %d called %d times", n, grain, i, c)
				}
			}
		}
	}
}

func TestWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, tc := range []struct{ n, grain, want int }{
		{0, 1, 1}, {1, 1, 1}, {3, 1, 3}, {100, 1, 4}, {100, 16, 4}, {40, 16, 2}, {31, 16, 1}, {5, 0, 4},
	} {
		if got := Workers(tc.n, tc.grain); got != tc.want {
			t.Errorf("Workers(%d, %d) = %d, want %d", tc.n, tc.grain, got, tc.want)
		}
	}
}

// TestTryReturnsTheLowestFailure: whatever the interleaving, the error is
// the one a loop in order stops at.
func TestTryReturnsTheLowestFailure(t *testing.T) {
	for _, procs := range []int{1, 2, 8} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for round := range 50 {
				fails := map[int]bool{round + 3: true, round + 10: true, 90: true}
				err := Try(100, func(i int) error {
					if fails[i] {
						return fmt.Errorf("item %d", i)
					}
					return nil
				})
				if want := fmt.Sprintf("item %d", round+3); err == nil || err.Error() != want {
					t.Fatalf("procs %d: %v, want %s", procs, err, want)
				}
			}
			if err := Try(100, func(int) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}()
	}
}

func TestTryStopsStartingAfterAFailure(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var started atomic.Int32
	boom := errors.New("boom")
	err := Try(100000, func(i int) error {
		started.Add(1)
		if i == 0 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if n := started.Load(); n == 100000 {
		t.Fatalf("every item started after the first failed")
	}
}

func TestPool(t *testing.T) {
	var sum atomic.Int64
	p := NewPool(4, func(v int) { sum.Add(int64(v)) })
	for i := range 1000 {
		p.Put(i)
	}
	p.Close()
	if got := sum.Load(); got != 999*1000/2 {
		t.Fatalf("sum %d", got)
	}
}
