package locking

// Keys are the Redis names of the lock on one key, as KeysOf builds them.
type Keys struct {
	Hash    string // P{K}: the lock hash, owner token -> hold count
	Fence   string // P{K}:fence: the fencing counter
	Channel string // P{K}:released: the release channel
}

// KeysOf returns the Redis names of the lock on key name under prefix (Options.KeyPrefix;
// used as given, the default "lock:" is not filled in here). It is the one place that
// builds the package's Redis names: every kind derives its own from Keys.Hash.
//
// The layout, for key K and prefix P, every name under the one hash tag {K} so that a lock
// and all its companions live in one Redis Cluster slot:
//
//	P{K}                 hash: one field, owner token (32 hex chars) -> hold count; PEXPIRE = lease
//	P{K}:fence           string: the last fencing token issued for K
//	P{K}:released        channel: published (payload: owner token) on the last release
//	P{K}:gone:<owner>    string, PEXPIRE = lease: the tombstone of an owner that gave up
//	                     and cleaned up (fair_release.lua's clean-up; forget.lua on a
//	                     Redlock node): an acquire of that owner arriving at
//	                     Redis after its clean-up (late, on another connection) takes nothing
//	P{K}:waiting         sorted set: owner of a waiting Obtain -> when its interest lapses
//	                     (ms, Redis clock): a little after the lease its last attempt saw,
//	                     when it tries again; Lock.Waiters counts it
//
// The fair lock (Client.ObtainFair) is the same lock with a queue of waiters beside it:
//
//	P{K}:queue           list: waiting owners, oldest first
//	P{K}:queue:timeouts  sorted set: waiting owner -> when its place lapses (ms, Redis clock)
//	P{K}:turn:<owner>    channel: published to wake the waiter at the head of the queue
//
// A Semaphore has names of its own (and no fencing counter):
//
//	P{K}:sem             sorted set: permit id -> expiry (ms, Redis server clock)
//	P{K}:sem:order       sorted set: permit id -> ticket
//	P{K}:sem:counter     string: the last ticket
//	P{K}:sem:released    channel: published on each release
//	P{K}:sem:gone:<id>   string, PEXPIRE = lease: the tombstone of a permit id whose
//	                     acquire call was cleaned up (as P{K}:gone:<owner>)
//
// A Redlock uses the lock's three names on each of its nodes.
func KeysOf(prefix, name string) Keys {
	h := prefix + "{" + name + "}"
	return Keys{Hash: h, Fence: h + ":fence", Channel: h + ":released"}
}

// RedisKey returns the Redis key of the lock hash of name for this Client: its key prefix +
// "{" + name + "}" (KeysOf(prefix, name).Hash).
func (c *Client) RedisKey(name string) string { return c.keysFor(name).hash }

// RedisKey returns the Redis key of the lock hash of name, the same on every node: the key
// prefix + "{" + name + "}" (KeysOf(prefix, name).Hash).
func (r *Redlock) RedisKey(name string) string { return r.c.RedisKey(name) }

// keys are the Redis names of one lock as the package uses them: KeysOf's, with the
// caller's name. A Semaphore fills them with its own names (Semaphore.keysFor).
type keys struct {
	name    string // the caller's key K
	hash    string // P{K}: the lock hash
	fence   string // P{K}:fence: the fencing counter
	channel string // P{K}:released: published on the last release
}

func (c *Client) keysFor(key string) keys {
	k := KeysOf(c.prefix, key)
	return keys{name: key, hash: k.Hash, fence: k.Fence, channel: k.Channel}
}

// gone is the tombstone of owner on k (same hash tag, so the same Cluster slot): left by the
// clean-up of an owner that gave up, honoured by the acquire scripts for one lease.
func (k keys) gone(owner string) string { return k.hash + ":gone:" + owner }

// waiting is the set of owners waiting for k (acquire_waiting.lua): what Lock.Waiters counts.
func (k keys) waiting() string { return k.hash + ":waiting" }

// fairKeys are the queue's names of k; turn + owner is a waiter's channel.
type fairKeys struct{ queue, timeouts, turn string }

func (k keys) fair() fairKeys {
	return fairKeys{queue: k.hash + ":queue", timeouts: k.hash + ":queue:timeouts", turn: k.hash + ":turn:"}
}

// keysFor returns the semaphore's names for key: hash is the permits set, fence the order
// set (there is no fencing counter), channel the release channel.
func (s *Semaphore) keysFor(key string) keys {
	p := KeysOf(s.c.prefix, key).Hash + ":sem"
	return keys{name: key, hash: p, fence: p + ":order", channel: p + ":released"}
}

// semKeys are the KEYS of semaphore_renew.lua and the first three of semaphore_acquire.lua
// (whose fourth is the permit id's tombstone): the permits set, the order set and the ticket
// counter.
func semKeys(k keys) []string { return []string{k.hash, k.fence, k.hash + ":counter"} }
