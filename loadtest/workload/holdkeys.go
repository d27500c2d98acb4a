package workload

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/internal/verdict"
	"github.com/stockguard/stockguard/loadtest/client"
)

// placeHold sends the placement of h under h.Key to its instance; with retry sent twice, the
// copy to the next instance (where a client retrying through a balancer would land): for even
// numbers both at once (two requests in flight under one key), for odd ones one after the other,
// as execute does for a purchase. h.Place is the answer that decides (decidePlace).
func (w *Workload) placeHold(ctx context.Context, h *hold, seq int, retry bool) {
	strategy := holdStrategy(w.strategy)
	send := func(instance int) client.CartResult {
		r := w.apis[instance].PlaceHold(ctx, h.Lines, h.Key, w.cfg.HoldTTL, strategy)
		w.sends.Add(1)
		return r
	}
	other := (h.Instance + 1) % len(w.apis)
	if w.order != nil { // routed by item: the copy goes where its routing key goes, as a cart's
		other = h.Instance
	}
	switch {
	case retry && seq%2 == 0:
		var copyRes client.CartResult
		done := make(chan struct{})
		go func() { // owner: placeHold, which waits on done
			defer close(done)
			copyRes = send(other)
		}()
		r := send(h.Instance)
		<-done
		h.Attempts = append(h.Attempts, r, copyRes)
	case retry:
		h.Attempts = append(h.Attempts, send(h.Instance))
		if ctx.Err() == nil {
			h.Attempts = append(h.Attempts, send(other))
		}
	default:
		h.Attempts = append(h.Attempts, send(h.Instance))
	}
	for _, r := range h.Attempts {
		w.recordCart(r)
	}
	h.Place = decidePlace(h.Attempts)
}

// decidePlace returns the first answer of rs that names the hold (201, or 200: the key's hold
// replayed), else the last answer that came (a refusal), else the first one.
func decidePlace(rs []client.CartResult) client.CartResult {
	for _, r := range rs {
		if (r.Status == 201 || r.Status == 200) && r.Hold.ID > 0 {
			return r
		}
	}
	for i := len(rs) - 1; i >= 0; i-- {
		if answered(rs[i]) {
			return rs[i]
		}
	}
	if len(rs) == 0 {
		return client.CartResult{}
	}
	return rs[0]
}

// answered reports whether r is an answer that says what the server did (not a lost one, not
// a 5xx).
func answered(r client.CartResult) bool { return r.Status != 0 && r.Status < 500 }

// unknown reports whether h's placement may have set units aside that no answer told of: no
// answer names its hold, an attempt was lost or a 5xx, and no replay after the run was refused
// outright. A replay is sent under the key once every attempt has ended, and the server
// answers a key's existing hold before anything else: its refusal (409 short, ...) says that
// the key holds nothing. An attempt's refusal does not: a lost attempt may still be running.
func (h *hold) unknown() bool {
	if p := decidePlace(append(slices.Clone(h.Attempts), h.Replays...)); (p.Status == 201 || p.Status == 200) && p.Hold.ID > 0 {
		return false
	}
	if slices.ContainsFunc(h.Replays, answered) {
		return false
	}
	return slices.ContainsFunc(h.Attempts, func(r client.CartResult) bool { return !answered(r) })
}

// unknownPlacement reports whether no answer of rs names a hold and one of them came without
// answer or as a 5xx: the placement may have set units aside that no answer told of.
func unknownPlacement(rs []client.CartResult) bool {
	if p := decidePlace(rs); p.Status == 201 || p.Status == 200 {
		return false
	}
	return slices.ContainsFunc(rs, func(r client.CartResult) bool { return r.Status == 0 || r.Status >= 500 })
}

// replayPlacement sends h's placement again under its key, to the next instances, up to 3
// times until an answer comes: the key's hold (200) when a lost attempt placed it, a new one
// (201) when none did, or a refusal. A hold placed this way is left to expire (its fate was
// the run's). It reports whether an answer came.
func (w *Workload) replayPlacement(ctx context.Context, h *hold) bool {
	strategy := holdStrategy(w.strategy)
	for try := 0; try < 3 && ctx.Err() == nil; try++ {
		a := w.apis[(h.Instance+try+1)%len(w.apis)]
		r := a.PlaceHold(ctx, h.Lines, h.Key, w.cfg.HoldTTL, strategy)
		h.Replays = append(h.Replays, r)
		if r.Status != 0 && r.Status < 500 {
			break
		}
	}
	h.Place = decidePlace(append(slices.Clone(h.Attempts), h.Replays...))
	if h.placed() && len(h.Confirms) == 0 && len(h.Cancels) == 0 {
		h.Fate, h.Late = fateExpire, false
	}
	return !h.unknown()
}

// holdKeys is every hold placement of the run with its key and the hold each answer named.
func (w *Workload) holdKeys() []verdict.HoldKey {
	out := make([]verdict.HoldKey, 0, len(w.holdList))
	for _, h := range w.holdList {
		k := verdict.HoldKey{Key: h.Key, Unknown: h.unknown()}
		for _, r := range append(slices.Clone(h.Attempts), h.Replays...) {
			k.Answers = append(k.Answers, verdict.HoldAnswer{Status: r.Status, HoldID: r.Hold.ID})
		}
		out = append(out, k)
	}
	return out
}

// probeMargin is how many missing ids in a row end the search past the lowest and the highest
// hold id the answers named, beyond one per placement attempt that named no new hold: SQLite's
// rowids have no gaps, PostgreSQL's sequence skips the id of every rolled-back insert (a
// placement that lost the race for its key to another process, then replayed it).
const probeMargin = 32

// serverHolds finds every hold the servers keep (GET /api/holds/:id, 200 or 404): every id
// between the lowest and the highest one the answers named, then on each side until margin ids
// in a row are missing (probeMargin + the placement attempts that named no new hold, each of
// which may have taken an id and rolled back). A run starts on a freshly reset catalogue (reset
// deletes the holds), so every hold found was placed by the run. With no id named, it counts
// nothing (Complete false).
func (w *Workload) serverHolds(ctx context.Context) (*verdict.ServerHolds, error) {
	named := map[int64]bool{}
	attempts := 0
	for _, h := range w.holdList {
		for _, r := range append(slices.Clone(h.Attempts), h.Replays...) {
			attempts++
			if (r.Status == 201 || r.Status == 200) && r.Hold.ID > 0 {
				named[r.Hold.ID] = true
			}
		}
	}
	margin := probeMargin + attempts - len(named)
	if len(named) == 0 {
		return &verdict.ServerHolds{}, nil
	}
	ids := make([]int64, 0, len(named))
	for id := range named {
		ids = append(ids, id)
	}
	lo, hi := slices.Min(ids), slices.Max(ids)
	out := &verdict.ServerHolds{Complete: true}
	for id := lo; id <= hi; id++ {
		ok, err := w.holdExists(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out.IDs = append(out.IDs, id)
		}
	}
	for _, step := range []int64{-1, 1} {
		id := lo - 1
		if step > 0 {
			id = hi + 1
		}
		for missing := 0; missing < margin && id > 0; id += step {
			ok, err := w.holdExists(ctx, id)
			if err != nil {
				return nil, err
			}
			if ok {
				out.IDs, missing = append(out.IDs, id), 0
			} else {
				missing++
			}
		}
	}
	slices.Sort(out.IDs)
	return out, nil
}

// holdExists asks GET /api/holds/:id: true on 200, false on 404, an error otherwise.
func (w *Workload) holdExists(ctx context.Context, id int64) (bool, error) {
	status, err := w.apis[0].Do(ctx, http.MethodGet, fmt.Sprintf("/api/holds/%d", id), nil, nil, nil)
	var e *storeapi.Error
	switch {
	case err == nil:
		return true, nil
	case status == http.StatusNotFound && errors.As(err, &e):
		return false, nil
	}
	return false, fmt.Errorf("counting the holds on the servers: GET /api/holds/%d: %w", id, err)
}
