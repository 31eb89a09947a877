package dpol

import (
	"sync"
	"time"

	"github.com/aptible/supercronic/cronexpr"
)

// Schedule is a DeletingPolicy's spec.schedule, parsed as Kyverno parses
// it: github.com/aptible/supercronic/cronexpr (the version Kyverno 1.19
// builds with). Five fields are the standard minute, hour, day of month,
// month and day of week; six add a year; seven start with seconds
// ("*/10 * * * * * *": every ten seconds); the @yearly, @daily, ...
// aliases are accepted; fields beyond the seventh are ignored. A Schedule
// is safe for concurrent use (a compiled policy is shared by the runs).
type Schedule struct {
	// mu guards expr: cronexpr.Expression.Next keeps its work in the
	// expression.
	mu   *sync.Mutex
	expr *cronexpr.Expression
	text string
}

// ParseSchedule parses a cron expression.
func ParseSchedule(s string) (Schedule, error) {
	e, err := cronexpr.Parse(s)
	if err != nil {
		return Schedule{}, err
	}
	return Schedule{mu: &sync.Mutex{}, expr: e, text: s}, nil
}

// String returns the expression as written.
func (s Schedule) String() string { return s.text }

// Next returns the first time the schedule names after t (in t's time
// zone), and false when there is none (a year in the past): such a policy
// never runs. Kyverno evaluates schedules in the process's time zone
// (metav1.Time decodes to time.Local): so does ExecutionTime.
func (s Schedule) Next(t time.Time) (time.Time, bool) {
	if s.expr == nil || t.IsZero() {
		return time.Time{}, false
	}
	s.mu.Lock()
	n := s.expr.Next(t)
	s.mu.Unlock()
	return n, !n.IsZero()
}

// ExecutionTime is when a policy runs next, as Kyverno computes it
// (api policies.kyverno.io/v1beta1 GetExecutionTime): the first time the
// schedule names after the last execution (status.lastExecutionTime), or
// after the policy's creation when it never ran.
func (s Schedule) ExecutionTime(lastExecution, created time.Time) (time.Time, bool) {
	ref := created
	if !lastExecution.IsZero() {
		ref = lastExecution
	}
	return s.Next(ref.In(time.Local))
}
