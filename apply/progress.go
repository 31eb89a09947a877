package apply

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress draws a bar on stderr for long runs on a terminal.
type progress struct {
	w     io.Writer
	on    bool
	total int
	n     int
	last  time.Time
	mu    chan struct{}
}

func newProgress(mode string, total int, w io.Writer) *progress {
	p := &progress{w: w, total: total, mu: make(chan struct{}, 1)}
	switch mode {
	case "always":
		p.on = true
	case "never":
	default:
		f, ok := w.(*os.File)
		if !ok {
			break
		}
		fi, err := f.Stat()
		p.on = err == nil && fi.Mode()&os.ModeCharDevice != 0 && total >= 200
	}
	return p
}

func (p *progress) add(k int) {
	if !p.on {
		return
	}
	p.mu <- struct{}{}
	defer func() { <-p.mu }()
	p.n += k
	if time.Since(p.last) < 100*time.Millisecond && p.n < p.total {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := width * p.n / max(p.total, 1)
	// The bar is best-effort: a failed write to stderr is not the run's.
	_, _ = fmt.Fprintf(p.w, "\r[%s%s] %d/%d", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.n, p.total)
}

func (p *progress) done(took time.Duration) {
	if !p.on {
		return
	}
	rate := float64(p.total) / took.Seconds()
	_, _ = fmt.Fprintf(p.w, "\r%d resources in %v (%.0f/s)%s\n", p.total, took.Round(time.Millisecond), rate, strings.Repeat(" ", 20))
}
