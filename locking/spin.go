package locking

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Defaults of SpinOptions.
const (
	DefaultSpinMinBackoff = 2 * time.Millisecond
	DefaultSpinMaxBackoff = 50 * time.Millisecond
)

// SpinOptions configure spin mode (Options.Spin): a waiter polls instead of waiting for a
// release message. After the n-th failed attempt it sleeps a random time between d/2 and d,
// where d = MinBackoff·2ⁿ capped at MaxBackoff, and never longer than the holder's remaining
// lease returned by the failed attempt. A released lock is thus taken at most about
// MaxBackoff later; the random half keeps the waiters of one key from polling in step.
type SpinOptions struct {
	// MinBackoff is the first sleep. Default 2ms.
	MinBackoff time.Duration
	// MaxBackoff caps the sleep; it bounds the extra latency of a handoff. Default 50ms,
	// and never below MinBackoff.
	MaxBackoff time.Duration
}

func (s *SpinOptions) withDefaults() SpinOptions {
	var o SpinOptions
	if s != nil {
		o = *s
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultSpinMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultSpinMaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	return o
}

// sleep returns the n-th sleep (n from 0), bounded by hint when hint > 0.
func (s SpinOptions) sleep(n int, hint time.Duration) time.Duration {
	d := s.MaxBackoff
	if n < 30 {
		d = min(s.MinBackoff<<n, s.MaxBackoff)
	}
	d = d/2 + rand.N(d/2+1)
	if hint > 0 {
		d = min(d, hint)
	}
	return d
}

// spinWait is waitLoop in spin mode (and Redlock's retry loop): it sleeps, calls attempt,
// and repeats with a growing backoff until attempt succeeds or fails, ctx ends, or the wait
// limit passes (zero or negative: none). The caller made one failed attempt already, whose
// hint (the holder's remaining lease; 0: none) bounds the first sleep as each attempt's
// bounds the next. It returns nil once attempt succeeded, ErrNotObtained (joined with
// ctx.Err() when ctx ended the wait), or attempt's error.
func spinWait(ctx context.Context, s SpinOptions, limit, hint time.Duration,
	attempt func(context.Context) (bool, time.Duration, error)) error {
	var limitC <-chan time.Time
	if limit > 0 {
		lt := time.NewTimer(limit)
		defer lt.Stop()
		limitC = lt.C
	}
	timer := time.NewTimer(s.sleep(0, hint))
	defer timer.Stop()
	for n := 1; ; n++ {
		select {
		case <-timer.C:
		case <-ctx.Done():
			return errors.Join(ErrNotObtained, ctx.Err())
		case <-limitC:
			return ErrNotObtained
		}
		ok, hint, err := attempt(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		timer.Reset(s.sleep(n, hint)) // hint <= 0: no bound but MaxBackoff
	}
}
