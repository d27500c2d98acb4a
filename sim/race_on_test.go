//go:build race

package sim

// raceOn: the simulator runs without -race (make test runs it on a line of its own).
const raceOn = true
