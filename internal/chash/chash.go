// Package chash is the consistent hash of nginx's `hash $key consistent` (ketama): the same
// servers and the same key give the same server, in the same order of fallbacks, as nginx. The
// load test routes purchases by item with it as deploy/nginx.conf does, and deploy's test checks
// it against a real nginx.
package chash

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// pointsPerServer is the number of points each server of weight 1 puts on the ring (nginx: 160
// times the weight).
const pointsPerServer = 160

// Ring places servers on a circle of 32-bit hashes. The zero value has no server.
type Ring struct {
	servers []string
	points  []point // ascending by hash, one per hash value
}

type point struct {
	hash   uint32
	server int // index in servers
}

// New returns the ring of servers, each named as in an nginx upstream's server line
// ("host:port"; a name without a port is port 80), all of weight 1.
func New(servers []string) *Ring {
	r := &Ring{servers: slices.Clone(servers)}
	for i, s := range servers {
		host, port := splitServer(s)
		// crc32(HOST \0 PORT PREV_HASH), PREV_HASH the point before (0 for the first), in
		// little-endian bytes: nginx's, compatible with Cache::Memcached::Fast.
		base := append(append([]byte(host), 0), port...)
		var prev uint32
		for range pointsPerServer {
			h := crc32.ChecksumIEEE(binary.LittleEndian.AppendUint32(slices.Clip(base), prev))
			r.points = append(r.points, point{hash: h, server: i})
			prev = h
		}
	}
	slices.SortStableFunc(r.points, func(a, b point) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return 0
	})
	// nginx keeps one point per hash value (which one of a tie is not specified there).
	r.points = slices.CompactFunc(r.points, func(a, b point) bool { return a.hash == b.hash })
	return r
}

// splitServer splits "host:port" as nginx does: the port is the digits after the last colon;
// without a colon before them the whole name is the host and the port is 80.
func splitServer(s string) (host, port string) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return s[:i], s[i+1:]
		}
		if s[i] < '0' || s[i] > '9' {
			break
		}
	}
	return s, "80"
}

// Servers returns the servers of the ring, in the order given to New.
func (r *Ring) Servers() []string { return slices.Clone(r.servers) }

// Order returns the indexes (into the servers given to New) of every server in the order nginx
// tries them for key: the server of the first point at or after crc32(key), going round the
// circle, then the servers of the next points, each once. nginx takes the first that is not
// down and has not failed for this request. (nginx gives up the ring for round-robin after
// skipping 20 points; with a handful of servers of 160 points each that does not happen.)
func (r *Ring) Order(key string) []int {
	if len(r.points) == 0 {
		return nil
	}
	h := crc32.ChecksumIEEE([]byte(key))
	start, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint32) int {
		switch {
		case p.hash < h:
			return -1
		case p.hash > h:
			return 1
		}
		return 0
	})
	order := make([]int, 0, len(r.servers))
	seen := make([]bool, len(r.servers))
	for k := 0; k < len(r.points) && len(order) < len(r.servers); k++ {
		s := r.points[(start+k)%len(r.points)].server
		if !seen[s] {
			seen[s] = true
			order = append(order, s)
		}
	}
	return order
}

// Pick returns the index of the server nginx sends key to when every server is up.
func (r *Ring) Pick(key string) int {
	o := r.Order(key)
	if len(o) == 0 {
		return -1
	}
	return o[0]
}
