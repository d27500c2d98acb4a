package inventory

// Queued returns how many purchases wait in the coalescing queue of strategy for itemID in s
// (tests use it to build a batch deterministically).
func Queued(s *Service, strategy string, itemID int64) int {
	r, ok := s.strategies[strategy].(holdRouter)
	if !ok {
		return 0
	}
	c := r.coalesced
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.items[itemID]; q != nil {
		return len(q.pending)
	}
	return 0
}
