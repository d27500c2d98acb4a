package workload

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/stockguard/stockguard/loadtest/client"
)

// spikeRamp is how long a -spike takes to go from no arrival to -rate.
const spikeRamp = time.Second

// inFlightEvery is the interval at which the open model samples the requests in flight.
const inFlightEvery = 100 * time.Millisecond

// InFlightPoint is one sample of the requests in flight during an open-model run.
type InFlightPoint struct {
	T        float64 `json:"t_s"`       // seconds since the start of the run
	InFlight int64   `json:"in_flight"` // requests sent and not answered yet
}

// arrival returns when the open model's arrival n (from 0) is meant to be sent, after the start
// of the run: n/rate at a fixed rate; with spike, a flash sale, the rate grows linearly from 0
// to rate over spikeRamp, then holds (the arrivals by t are rate*t²/(2*ramp) during the ramp).
func arrival(n int, rate float64, spike bool) time.Duration {
	x := float64(n)
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	if !spike {
		return secs(x / rate)
	}
	ramp := spikeRamp.Seconds()
	inRamp := rate * ramp / 2
	if x < inRamp {
		return secs(math.Sqrt(2 * x * ramp / rate))
	}
	return secs(ramp + (x-inRamp)/rate)
}

// queuedFor returns how long attempt i of the purchase s waited between its intended start and
// its send: the latency of the first attempt (and of a copy sent at once with it) counts from
// the schedule's intended start, not from the send, so that a client that falls behind does
// not hide the servers' slowness (coordinated omission, corrected as wrk2 does). A copy sent
// after the first answer counts from its own send.
func queuedFor(s spec, i int, r client.PurchaseResult) time.Duration {
	if s.intended.IsZero() || r.Start.IsZero() || (i > 0 && !(s.retry && s.seq%2 == 0)) {
		return 0
	}
	return max(r.Start.Sub(s.intended), 0)
}

// runOpen: operations arrive on a schedule (arrival) whatever the servers' speed, so slow
// answers show in the latency instead of lowering the load. Arrival n goes to instance n mod
// N (routed by item, -route item: to its item's instance, as a purchase of the closed model
// does); each is a read of an item's stock with probability -reads, else a purchase (-requests
// counts the purchases). At most Concurrency requests are in flight; a purchase arriving beyond
// that is counted as missed (a read is dropped). The requests in flight are sampled every
// inFlightEvery.
func (w *Workload) runOpen(ctx, runCtx context.Context, limit int, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	sem := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	stopSampling := w.sampleInFlight(start)
	defer stopSampling()
	timer := time.NewTimer(0)
	defer timer.Stop()
	purchases := 0
	for n := 0; purchases < limit; n++ {
		intended := start.Add(arrival(n, w.cfg.Rate, w.cfg.Spike))
		if d := time.Until(intended); d > 0 {
			timer.Reset(d)
			select {
			case <-runCtx.Done():
			case <-timer.C:
			}
		}
		if runCtx.Err() != nil {
			break
		}
		inst := n % len(w.apis)
		read := w.readNow(rng)
		var s spec
		var readID int64
		if read {
			readID = w.pickItem(rng)
			inst = w.instanceOf(readID, inst)
		} else { // next routes the purchase by item
			s = w.next(rng, purchases, inst)
			s.intended = intended
			purchases++
		}
		select {
		case sem <- struct{}{}:
		default:
			if !read {
				w.missed.Add(1)
			}
			continue
		}
		wg.Add(1)
		w.inFlight.Add(1)
		go func() { // owner: runOpen, which waits for it
			defer wg.Done()
			defer func() { <-sem }()
			defer w.inFlight.Add(-1)
			if read {
				w.read(ctx, w.apis[inst], readID)
				return
			}
			p := w.execute(ctx, s)
			w.resMu.Lock()
			w.results = append(w.results, p)
			w.resMu.Unlock()
		}()
	}
	wg.Wait()
}

// sampleInFlight records the requests in flight every inFlightEvery until the returned
// function is called (which waits for the sampler to stop and takes a last sample).
func (w *Workload) sampleInFlight(start time.Time) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	sample := func() {
		w.inFlightSeries = append(w.inFlightSeries, InFlightPoint{T: time.Since(start).Seconds(), InFlight: w.inFlight.Load()})
	}
	go func() { // owner: the returned stop, which closes done and waits on stopped
		defer close(stopped)
		t := time.NewTicker(inFlightEvery)
		defer t.Stop()
		sample()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		sample()
	}
}
