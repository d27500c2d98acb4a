package chash

import (
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var three = []string{"127.0.0.1:18081", "127.0.0.1:18082", "127.0.0.1:18083"}

// TestSameAsNginx compares with what nginx 1.22 (Debian's) answered for keys 1..40 of an
// upstream `hash $arg_k consistent` over these three servers: with all of them up, and with
// the second one refusing connections (nginx then tries the next server on the ring).
// deploy/nginx_test.go checks the same against a live nginx with the repository's config.
func TestSameAsNginx(t *testing.T) {
	const allUp = "2001020110002100212110111210102001201000"
	const secondDown = "2000020200002200202220002200002002202000"
	r := New(three)
	for k := 1; k <= 40; k++ {
		key := strconv.Itoa(k)
		assert.Equal(t, int(allUp[k-1]-'0'), r.Pick(key), "key %s", key)
		order := r.Order(key)
		alive := slices.DeleteFunc(slices.Clone(order), func(s int) bool { return s == 1 })
		assert.Equal(t, int(secondDown[k-1]-'0'), alive[0], "key %s with the second server down", key)
	}
}

func TestOrder(t *testing.T) {
	r := New(three)
	share := make([]int, len(three))
	for k := range 3000 {
		order := r.Order(strconv.Itoa(k))
		require.ElementsMatch(t, []int{0, 1, 2}, order, "every server once")
		assert.Equal(t, order, r.Order(strconv.Itoa(k)), "the same order every time")
		share[order[0]]++
	}
	for s, n := range share {
		assert.InDelta(t, 1000, n, 250, "server %d has %d of 3000 keys", s, n)
	}
}

// TestLosingAServerMovesOnlyItsKeys: the ring without a server sends the other servers' keys
// where it did, and that server's keys to their second server: adding or losing a server moves
// only its own keys.
func TestLosingAServerMovesOnlyItsKeys(t *testing.T) {
	full := New(three)
	less := New([]string{three[0], three[2]})
	toFull := []int{0, 2} // less's indexes in three
	for k := range 1000 {
		key := strconv.Itoa(k)
		order := full.Order(key)
		want := order[0]
		if want == 1 {
			want = order[1]
		}
		assert.Equal(t, want, toFull[less.Pick(key)], "key %s", key)
	}
}

func TestSplitServer(t *testing.T) {
	for _, c := range []struct{ in, host, port string }{
		{"127.0.0.1:8080", "127.0.0.1", "8080"},
		{"storefront-1:8080", "storefront-1", "8080"},
		{"storefront-1", "storefront-1", "80"},
		{"[::1]:8080", "[::1]", "8080"},
		{"[::1]", "[::1]", "80"},
		{"host:", "host", ""},
	} {
		host, port := splitServer(c.in)
		assert.Equal(t, c.host, host, c.in)
		assert.Equal(t, c.port, port, c.in)
	}
}

func TestEmpty(t *testing.T) {
	var r Ring
	assert.Nil(t, r.Order("1"))
	assert.Equal(t, -1, r.Pick("1"))
	assert.Equal(t, -1, New(nil).Pick("1"))
}
