package inventory

// DescribeStrategies returns the rows of the strategies table this service offers, in table
// order: the built-in rows, then Config.Extra (the lab page lists them from GET /api/strategies).
func (s *Service) DescribeStrategies() []StrategyInfo {
	return append([]StrategyInfo(nil), s.rows...)
}
