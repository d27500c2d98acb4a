package storeapi

import (
	"context"
	"fmt"
	"net/http"
)

// Strategy is one strategy an instance offers, as GET /api/strategies describes it.
type Strategy struct {
	Name        string `json:"name"`
	Description string `json:"description"` // how it sells
	Safety      string `json:"safety"`      // when it oversells, or why it does not
	// Safe: it never oversells, even when a lock is lost.
	Safe bool `json:"safe"`
	// TakesLock: it takes a per-item Redis lock (the faults that hit a lock holder apply to it).
	TakesLock bool `json:"takes_lock"`
	Default   bool `json:"default"`   // the instance's default strategy
	DemoOnly  bool `json:"demo_only"` // offered only in demo mode
	// RedisKeyPrefix is the prefix of the Redis keys of a demo strategy's own lock or stock
	// mirror ("" for the others).
	RedisKeyPrefix string `json:"redis_key_prefix,omitempty"`
}

// Strategies asks the instance at base which strategies it offers, in its order. It fails when
// an entry has no name or does not say whether it takes a lock (a server older than this client).
func Strategies(ctx context.Context, hc *http.Client, base string) ([]Strategy, error) {
	var raw []struct {
		Strategy
		TakesLock *bool `json:"takes_lock"`
	}
	if err := GetJSON(ctx, hc, base, "/api/strategies", &raw); err != nil {
		return nil, fmt.Errorf("GET /api/strategies: %w", err)
	}
	out := make([]Strategy, len(raw))
	for i, r := range raw {
		switch {
		case r.Name == "":
			return nil, fmt.Errorf("GET /api/strategies: entry %d has no name", i)
		case r.TakesLock == nil:
			return nil, fmt.Errorf("GET /api/strategies: strategy %q does not say whether it takes a lock (no takes_lock field: a storefront older than this client)", r.Name)
		}
		out[i] = r.Strategy
		out[i].TakesLock = *r.TakesLock
	}
	return out, nil
}

// Find returns the strategy of that name in list.
func Find(list []Strategy, name string) (Strategy, bool) {
	for _, s := range list {
		if s.Name == name {
			return s, true
		}
	}
	return Strategy{}, false
}
