package gctune

import (
	"runtime/debug"
	"testing"
)

func TestApply(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	t.Setenv("GOGC", "")
	if got := Apply(); got != Percent {
		t.Fatalf("Apply() = %d without GOGC, want %d", got, Percent)
	}
	if got := debug.SetGCPercent(Percent); got != Percent {
		t.Fatalf("GC percent in effect = %d, want %d", got, Percent)
	}

	// An explicit GOGC wins: the runtime read it at start; Apply keeps
	// whatever is in effect.
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	if got := Apply(); got != 150 {
		t.Fatalf("Apply() = %d with GOGC=150, want 150", got)
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Fatalf("GC percent in effect = %d, want 150 (Apply must not change it)", got)
	}
}
