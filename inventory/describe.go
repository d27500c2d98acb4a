package inventory

// DescribeStrategies returns the rows of the strategies table this service offers, in table
// order (the lab page lists them from GET /api/strategies).
func (s *Service) DescribeStrategies() []StrategyInfo {
	infos := make([]StrategyInfo, 0, len(s.names))
	for _, st := range strategyTable {
		if _, ok := s.strategies[st.Name]; ok {
			infos = append(infos, st)
		}
	}
	return infos
}
