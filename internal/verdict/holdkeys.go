package verdict

import (
	"fmt"
	"slices"
)

// HoldKey is one hold placement as its client saw it: its Idempotency-Key and the hold id of
// every answer to it, in the order they came (the attempt, the copy sent under the same key,
// the replays of an unanswered one after the run).
type HoldKey struct {
	Key     string
	Answers []HoldAnswer
	// Unknown: no answer names a hold and the placement may have set units aside anyway (an
	// attempt lost or a 5xx, and no replay after the run refused outright): the key may own
	// one hold no answer names.
	Unknown bool
}

// HoldAnswer is one answer to a hold placement: Status 0 when none came; HoldID the hold a
// 201 or a 200 (the replay of the key's hold, as it stands now) named.
type HoldAnswer struct {
	Status int
	HoldID int64
}

// ServerHolds is every hold the servers keep after the run (their ids), as the client found
// them: a run starts on a freshly reset catalogue (reset deletes the holds), so every hold on
// the servers was placed by the run. Complete is false when they could not be counted.
type ServerHolds struct {
	IDs      []int64
	Complete bool
}

// checkHoldKeys checks that no retry held twice (docs/DESIGN.md §12 #16): the answers under one
// key name one hold, and every hold on the servers is the one hold of a key, so the servers
// keep as many holds as there are keys answered 201 or 200. An Unknown key (its answers lost,
// no replay refused) may have placed one hold no answer names: up to one unnamed hold per such
// key is its own, not a second one.
func (f *Findings) checkHoldKeys(keys []HoldKey, server *ServerHolds) {
	named := map[int64]string{} // hold id -> the key whose answer named it
	unknown := 0
	for _, k := range keys {
		var ids []int64
		for _, a := range k.Answers {
			if (a.Status == 201 || a.Status == 200) && a.HoldID > 0 && !slices.Contains(ids, a.HoldID) {
				ids = append(ids, a.HoldID)
			}
		}
		if len(ids) == 0 && k.Unknown {
			unknown++
		}
		if len(ids) > 0 {
			f.HoldKeys++
		}
		if len(ids) > 1 {
			f.DoubleHolds += len(ids) - 1
			f.violate("hold key %s was answered with holds %v: a retry under the key held again", k.Key, ids)
		}
		for _, id := range ids {
			if other, ok := named[id]; ok && other != k.Key {
				f.KeyConflicts++
				f.violate("hold %d was answered under keys %s and %s", id, other, k.Key)
			}
			named[id] = k.Key
		}
	}
	if server == nil || !server.Complete {
		return
	}
	f.ServerHolds = len(server.IDs)
	on := make(map[int64]bool, len(server.IDs))
	var unnamed []int64
	for _, id := range server.IDs {
		on[id] = true
		if _, ok := named[id]; !ok {
			unnamed = append(unnamed, id)
		}
	}
	missing := 0
	for id, key := range named {
		if !on[id] {
			missing++
			f.violate("hold %d (key %s) was answered but is not on the servers", id, key)
		}
	}
	f.HoldMismatch += missing
	if extra := len(unnamed) - unknown; extra > 0 {
		slices.Sort(unnamed)
		f.DoubleHolds += extra
		f.violate("the servers keep %d holds no answer named (%s), %d more than the %d placements whose every answer was lost: a retry under a key held again",
			len(unnamed), fmtIDs(unnamed), extra, unknown)
	}
}

// fmtIDs shows at most 10 ids.
func fmtIDs(ids []int64) string {
	if len(ids) > 10 {
		return fmt.Sprintf("%v and %d more", ids[:10], len(ids)-10)
	}
	return fmt.Sprint(ids)
}
