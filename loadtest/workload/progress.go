package workload

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Progress shows a strategy's run: a bar redrawn in place on a terminal, a plain line every
// few seconds otherwise. start launches its goroutine; finish stops it and waits.
type Progress struct {
	w     io.Writer
	tty   bool
	label string
	total int           // purchases to do, 0 when bounded by duration only
	dur   time.Duration // run length, 0 when bounded by requests only
	wl    *Workload
	begin time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// NewProgress returns the progress display of w's run under label, written to out (nil: none).
func NewProgress(w *Workload, label string, out io.Writer) *Progress {
	p := &Progress{label: label, total: w.cfg.Requests, dur: w.cfg.Duration, wl: w}
	if out != nil {
		p.w, p.tty = out, isTerminal(out)
	}
	return p
}

// Start starts the display's goroutine (none without an output).
func (p *Progress) Start() {
	if p.w == nil {
		return
	}
	p.begin, p.stop = time.Now(), make(chan struct{})
	every := 2 * time.Second
	if p.tty {
		every = 150 * time.Millisecond
	}
	p.wg.Add(1)
	go func() { // owner: p; finish stops it
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw(false)
			}
		}
	}()
}

// Finish stops the display's goroutine, waits for it, and draws the last line.
func (p *Progress) Finish() {
	if p.w == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.draw(true)
}

func (p *Progress) draw(final bool) {
	el := time.Since(p.begin)
	done := p.wl.done.Load()
	frac := 0.0
	if p.total > 0 {
		frac = float64(done) / float64(p.total)
	}
	if p.dur > 0 {
		frac = max(frac, float64(el)/float64(p.dur))
	}
	if final {
		frac = 1
	}
	frac = min(frac, 1)
	rps := float64(done) / max(el.Seconds(), 1e-3)
	stats := fmt.Sprintf("%6d done %7.0f/s  201: %d  errors: %d", done, rps, p.wl.created.Load(), p.wl.failed.Load())
	if !p.tty {
		fmt.Fprintf(p.w, "%-11s %3.0f%% %s  %.1fs\n", p.label, frac*100, stats, el.Seconds())
		return
	}
	const width = 28
	n := int(frac * width)
	bar := strings.Repeat("█", n) + strings.Repeat("░", width-n)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r\033[K%-11s %s %3.0f%% %s%s", p.label, bar, frac*100, stats, end)
}
