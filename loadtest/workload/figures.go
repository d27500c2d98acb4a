package workload

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/stockguard/stockguard/loadtest/config"
)

// CartFigures are the measurements of a cart or hold workload's run.
type CartFigures struct {
	Workload        string  `json:"workload"`
	Checkouts       int     `json:"checkouts"`         // checkouts (keys)
	CheckoutsPerSec float64 `json:"checkouts_per_s"`   // checkouts answered per second (any answer)
	SoldPerSec      float64 `json:"sold_per_s"`        // checkouts answered 201 per second
	HotCheckouts    int     `json:"hot_checkouts"`     // checkouts with a line of the hot item
	HotSoldPerSec   float64 `json:"hot_sold_per_s"`    // of them, answered 201 per second
	HotPerSec       float64 `json:"hot_per_s"`         // of them, answered per second
	P99MS           float64 `json:"p99_ms"`            // 99th percentile latency of a checkout's answered attempts
	BySize          []Size  `json:"by_size"`           // sold checkouts by their distinct items
	PerExtraItemMS  float64 `json:"per_extra_item_ms"` // least-squares slope of a sold checkout's mean latency per distinct item
	MultiItem       int     `json:"multi_item"`        // checkouts sold and holds placed with several distinct items
	// -workload cart: the single purchases of the hot item among the checkouts (-cart-singles),
	// counted in none of the figures above.
	Singles           int     `json:"singles,omitempty"`
	SinglesSoldPerSec float64 `json:"singles_sold_per_s,omitempty"`
	// The servers' lock waits by class (lockwait.go) and the coalesced holds (nil: the
	// instances' /metrics could not be read).
	LockWaits []LockWait   `json:"lock_waits"`
	Coalesced *HoldFigures `json:"coalesced_holds,omitempty"`
	// -workload holds
	Holds          int     `json:"holds,omitempty"`           // holds asked for
	Placed         int     `json:"placed,omitempty"`          // answered 201, or 200 (the key's hold replayed)
	Short          int     `json:"short,omitempty"`           // refused for want of stock
	Retried        int     `json:"retried,omitempty"`         // placements sent twice under their key (-retry)
	KeyReplays     int     `json:"key_replays,omitempty"`     // placement answers 200: the key's hold, set aside once
	Lost           int     `json:"lost,omitempty"`            // placements no attempt got an answer (or a 5xx) for, replayed under their key after the run
	Recovered      int     `json:"recovered,omitempty"`       // of them, answered by the replay (200: the lost attempt had placed it; 201: none had)
	Confirmed      int     `json:"confirmed,omitempty"`       // confirmed (201) in time
	Cancelled      int     `json:"cancelled,omitempty"`       // cancelled (204)
	Expired        int     `json:"expired,omitempty"`         // left to expire
	LateRefused    int     `json:"late_refused,omitempty"`    // confirmed after their expiry and refused hold_expired
	PlaceMeanMS    float64 `json:"place_mean_ms,omitempty"`   // a hold answered 201
	ConfirmMeanMS  float64 `json:"confirm_mean_ms,omitempty"` // a confirmation answered 201
	HoldThenMS     float64 `json:"hold_then_confirm_ms,omitempty"`
	CheckoutMeanMS float64 `json:"checkout_mean_ms,omitempty"` // a direct checkout answered 201
	HeldAtEnd      int     `json:"held_at_end,omitempty"`      // units of holds past their expiry that no sale had given back yet
	Resold         int     `json:"resold,omitempty"`           // units bought back once every hold had expired
}

// Size is the sold checkouts of one number of distinct items.
type Size struct {
	Items  int     `json:"items"`
	Sold   int     `json:"sold"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
}

// cartFigures measures the run from the client's record.
func (w *Workload) cartFigures(elapsed time.Duration, lost int) *CartFigures {
	secs := max(elapsed.Seconds(), 1e-3)
	f := &CartFigures{Workload: w.cfg.Workload, Lost: lost, LockWaits: w.lockWaits()}
	bySize := map[int][]float64{}
	var direct, all []float64
	for _, c := range w.cartList {
		if c.Single {
			f.Singles++
			for _, r := range c.Attempts {
				f.SinglesSoldPerSec += b2f(r.Status == 201)
			}
			continue
		}
		f.Checkouts++
		for _, r := range c.Attempts {
			answered := r.Status != 0
			if answered {
				all = append(all, ms(r.Latency))
			}
			sold := r.Status == 201
			f.CheckoutsPerSec += b2f(answered)
			f.SoldPerSec += b2f(sold)
			if c.Hot {
				f.HotPerSec += b2f(answered)
				f.HotSoldPerSec += b2f(sold)
			}
			if sold && len(c.Merged) > 1 {
				f.MultiItem++
			}
			if sold {
				ms := float64(r.Latency) / float64(time.Millisecond)
				bySize[len(c.Merged)] = append(bySize[len(c.Merged)], ms)
				direct = append(direct, ms)
			}
		}
		if c.Hot {
			f.HotCheckouts++
		}
	}
	f.CheckoutsPerSec /= secs
	f.SoldPerSec /= secs
	f.HotPerSec /= secs
	f.HotSoldPerSec /= secs
	f.SinglesSoldPerSec /= secs
	f.P99MS = percentile(all, 0.99)
	var xs, ys []float64
	for n := 1; n <= MaxCartLines; n++ {
		ls := bySize[n]
		if len(ls) == 0 {
			continue
		}
		sz := Size{Items: n, Sold: len(ls), MeanMS: mean(ls), P50MS: median(ls)}
		f.BySize = append(f.BySize, sz)
		xs, ys = append(xs, float64(n)), append(ys, sz.MeanMS)
	}
	f.PerExtraItemMS = slope(xs, ys)
	if w.cfg.Workload != config.WorkloadHolds {
		return f
	}
	f.CheckoutMeanMS = mean(direct)
	var place, confirm, both []float64
	for _, h := range w.holdList {
		f.Holds++
		if len(h.Attempts) > 1 {
			f.Retried++
		}
		for _, r := range append(slices.Clone(h.Attempts), h.Replays...) {
			if r.Status == 200 {
				f.KeyReplays++
			}
		}
		if len(h.Replays) > 0 && !h.unknown() {
			f.Recovered++
		}
		switch {
		case h.placed():
			f.Placed++
			place = append(place, ms(h.Place.Latency))
			if len(h.Merged) > 1 {
				f.MultiItem++
			}
		case h.Place.Code == "insufficient_stock":
			f.Short++
		}
		if !h.placed() {
			continue
		}
		switch {
		case h.Fate == fateExpire:
			f.Expired++
			if h.Late && len(h.Confirms) > 0 && h.Confirms[len(h.Confirms)-1].Code == "hold_expired" {
				f.LateRefused++
			}
		case h.Fate == fateCancel && len(h.Cancels) > 0 && h.Cancels[0].Status == 204:
			f.Cancelled++
		case h.Fate == fateConfirm && len(h.Confirms) > 0 && h.Confirms[0].Status == 201:
			f.Confirmed++
			confirm = append(confirm, ms(h.Confirms[0].Latency))
			both = append(both, ms(h.Place.Latency+h.Paid+h.Confirms[0].Latency))
		}
	}
	f.PlaceMeanMS, f.ConfirmMeanMS, f.HoldThenMS = mean(place), mean(confirm), mean(both)
	return f
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

// percentile is the q-quantile of xs (nearest rank; 0 for none).
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// slope is the least-squares slope of ys against xs (0 with fewer than two points).
func slope(xs, ys []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	mx, my := mean(xs), mean(ys)
	num, den := 0.0, 0.0
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
