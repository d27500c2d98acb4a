package locking

// RedisAddrForExamples returns the address of the test redis-server, for the examples (package
// locking_test) to connect to.
func RedisAddrForExamples() string { return shared.Addr() }
