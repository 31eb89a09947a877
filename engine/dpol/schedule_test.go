package dpol

import (
	"sync"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSchedule: the next execution is the first time the schedule names
// after the last execution, or after the creation when the policy never
// ran (Kyverno's GetExecutionTime); five, six (year) and seven (seconds)
// fields and the aliases parse as Kyverno parses them.
func TestSchedule(t *testing.T) {
	loc := time.Local
	time.Local = time.UTC // Kyverno evaluates in the process's zone; pin it
	defer func() { time.Local = loc }()
	for _, c := range []struct {
		schedule, last, created, want string
	}{
		{"* * * * *", "", "2026-06-01T10:00:30Z", "2026-06-01T10:01:00Z"},
		{"* * * * *", "2026-06-01T10:05:00Z", "2026-06-01T10:00:30Z", "2026-06-01T10:06:00Z"},
		{"*/5 * * * *", "2026-06-01T10:03:59Z", "2026-01-01T00:00:00Z", "2026-06-01T10:05:00Z"},
		{"0 3 * * *", "", "2026-06-01T03:00:00Z", "2026-06-02T03:00:00Z"},
		{"@hourly", "2026-06-01T10:00:00Z", "", "2026-06-01T11:00:00Z"},
		{"*/10 * * * * * *", "2026-06-01T10:00:03Z", "", "2026-06-01T10:00:10Z"},
		{"0 0 1 1 * 2030", "", "2026-06-01T00:00:00Z", "2030-01-01T00:00:00Z"},
	} {
		s, err := ParseSchedule(c.schedule)
		if err != nil {
			t.Fatalf("%q: %v", c.schedule, err)
		}
		var last, created time.Time
		if c.last != "" {
			last = mustTime(t, c.last)
		}
		if c.created != "" {
			created = mustTime(t, c.created)
		}
		got, ok := s.ExecutionTime(last, created)
		if !ok || !got.Equal(mustTime(t, c.want)) {
			t.Errorf("%q after last %q, created %q: %v %v, want %s", c.schedule, c.last, c.created, got, ok, c.want)
		}
	}
	// A schedule naming no future time never runs (Kyverno would run it
	// every second: cronexpr's zero time is always past).
	s, err := ParseSchedule("0 0 1 1 * 2020")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.ExecutionTime(time.Time{}, mustTime(t, "2026-06-01T00:00:00Z")); ok {
		t.Errorf("a past year runs at %v", got)
	}
	for _, bad := range []string{"", "every minute", "* * * *", "61 * * * *"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestScheduleConcurrent: one Schedule (a compiled policy's) is read by
// the runs of several workers at once; cronexpr keeps its work in the
// expression, so each must get its own answer (run with -race).
func TestScheduleConcurrent(t *testing.T) {
	s, err := ParseSchedule("*/7 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	base := mustTime(t, "2026-06-01T10:00:00Z")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				from := base.Add(time.Duration(g*200+i) * time.Minute)
				got, ok := s.Next(from)
				if !ok || !got.After(from) || got.Minute()%7 != 0 || got.Sub(from) > 7*time.Minute {
					t.Errorf("Next(%v) = %v %v", from, got, ok)
					return
				}
			}
		}()
	}
	wg.Wait()
}
