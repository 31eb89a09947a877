// Package parallel runs work on a bounded number of goroutines: loops
// over indexes (For, ForGrain, Try) and a pool fed from a channel (Pool).
// It imports only the standard library and golang.org/x/sync, so the
// engine may use it.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// Workers is how many goroutines a loop of n items runs on when each
// goroutine should have at least grain items: at most GOMAXPROCS, at most
// n/grain, at least 1.
func Workers(n, grain int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/max(grain, 1)))
}

// For calls fn(i) for every i in [0, n), on up to GOMAXPROCS goroutines
// (on the caller's alone when there is one item or one processor). Each
// goroutine takes the next index when it is done with one, so a slow item
// does not hold up the others.
func For(n int, fn func(i int)) {
	ForGrain(n, 1, fn)
}

// ForGrain is For on at most n/grain goroutines: for cheap items, where a
// goroutine is worth starting only for grain of them or more.
func ForGrain(n, grain int, fn func(i int)) {
	_ = run(n, grain, func(i int) error { fn(i); return nil })
}

// Try calls fn(i) for every i in [0, n) as For does, until one fails: then
// no further index is started, the calls under way finish, and Try returns
// the error of the lowest index that failed — the error a loop over the
// indexes in order would have stopped at (every lower index was started
// before it, so every lower failure is seen).
func Try(n int, fn func(i int) error) error {
	return run(n, 1, fn)
}

func run(n, grain int, fn func(i int) error) error {
	workers := Workers(n, grain)
	if workers == 1 {
		for i := range n {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next   atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		first  = n // the lowest index that failed
		err    error
	)
	var g errgroup.Group
	for range workers {
		g.Go(func() error {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				if e := fn(i); e != nil {
					mu.Lock()
					if i < first {
						first, err = i, e
					}
					mu.Unlock()
					failed.Store(true)
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	return err
}

// Pool calls a function on every value put into it, on a fixed set of
// goroutines: long-lived, so the stacks deep work grows (CEL evaluation)
// are kept rather than grown again for each value.
type Pool[T any] struct {
	ch chan T
	g  errgroup.Group
}

// NewPool starts GOMAXPROCS goroutines calling fn on the values put into
// the pool, which holds up to buffer values not yet taken.
func NewPool[T any](buffer int, fn func(T)) *Pool[T] {
	p := &Pool[T]{ch: make(chan T, buffer)}
	for range runtime.GOMAXPROCS(0) {
		p.g.Go(func() error {
			for v := range p.ch {
				fn(v)
			}
			return nil
		})
	}
	return p
}

// Put hands v to the pool, waiting while its buffer is full.
func (p *Pool[T]) Put(v T) { p.ch <- v }

// Close waits until every value put is done and the goroutines have
// ended. Nothing may be put after.
func (p *Pool[T]) Close() {
	close(p.ch)
	_ = p.g.Wait()
}
