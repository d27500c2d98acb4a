package inventory

import "context"

// OverdueHolds counts the active holds past their expiry by the database's clock: holds whose
// units the next write of one of their items gives back (expireHolds), since no background job
// ends them. A count that climbs through a soak is holds nothing ends: their items are never
// written again, so their rows stay active (their units are available all the same: the read
// of the available stock counts them).
func (s *Service) OverdueHolds(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Raw(dialect(s.store.pg,
		`SELECT COUNT(*) FROM holds WHERE status = 'active' AND expires_at_ms <= {now}`)).Scan(&n).Error
	if err != nil {
		return 0, s.dbErr(err)
	}
	return n, nil
}
