// Package sim is the storefront's simulator: the real sale path (inventory, locking, models)
// runs in simulated time, in a testing/synctest bubble, against a simulated network to Redis
// and a real SQLite file, under a fault schedule drawn from a seed; after each run the
// project's own checks (internal/verdict, internal/linearize) and a liveness probe judge what
// the buyers were told. docs/simulation.md describes it; `make sim` runs it.
//
// One run is several storefront processes, each with its own inventory.Service, locking.Client
// and connection pools, as main wires them; one miniredis whose TTLs follow the bubble's clock
// (ClockTTL); one database file. The schedule (Plan) kills processes, holds a process's
// writes past its lease, empties, hangs or slows Redis, loses or fails COMMITs, slows
// statements and steps the database's clock.
//
// The storefront's packages know the simulator only through these seams:
//   - Redis: go-redis's Dialer option (redis.Options.Dialer), which hands the client a pipe to
//     miniredis instead of a socket (redis.go). locking.New takes any go-redis client.
//   - The database handle and the statements of one process: models.WithSQLiteDriver opens
//     the file through this package's database/sql driver (driver.go), which wraps
//     mattn/go-sqlite3 per process: it holds, slows or fails that process's transactions,
//     serialises every writer on a channel (SQLite's busy handler sleeps in C, where the bubble
//     cannot see it wait: the busy timeout is 0), and carries the SQL mutations.
//   - The database's clock: the storefront's SQL reads it as julianday('now') on SQLite
//     ({now}, inventory's nowMS); the driver registers julianday on every connection it opens,
//     reading the bubble's clock plus the schedule's steps. Holds expire by it.
//   - Answers: handlers.ErrorAnswer, the status and code the API would answer an error with,
//     so that the checks read each answer as an HTTP client would.
//   - One mutation needs a switch inside inventory: inventory.MutateReuseTriedToken exists in a
//     build with the simmutation tag only.
package sim
