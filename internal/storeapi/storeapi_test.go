package storeapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/redistest"
	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/locking"
)

// instance serves GET /api/debug/locks like a demo-mode storefront holding locks (which may
// change while it runs).
func instance(t *testing.T, pid int, locks func() []HeldLock) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/debug/locks" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Locks{PID: pid, Locks: locks()})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func holding(l ...HeldLock) func() []HeldLock { return func() []HeldLock { return l } }

// stopped answers nothing until the request is abandoned: a SIGSTOPped process.
func stopped(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv
}

// notDemo answers every path 404 with the API's error body: a storefront outside demo mode.
func notDemo(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"debug endpoints need --demo"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestFindHolder(t *testing.T) {
	lock7 := HeldLock{Name: "item:7", ItemID: 7, Token: 12, RedisKey: "p{item:7}", FenceKey: "p{item:7}:fence"}
	lock7Next := HeldLock{Name: "item:7", ItemID: 7, Token: 13, RedisKey: "p{item:7}", FenceKey: "p{item:7}:fence"}
	other := HeldLock{Name: "item:8", ItemID: 8, Token: 3, RedisKey: "p{item:8}"}
	bases := []string{
		stopped(t).URL,
		notDemo(t).URL,
		instance(t, 101, holding(other)).URL,
		instance(t, 102, holding(other, lock7)).URL,
		instance(t, 103, holding(lock7Next)).URL,
		"http://127.0.0.1:1", // nobody listens
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	hs := Holders(ctx, http.DefaultClient, bases, 7)
	require.Len(t, hs, 2, "the stale holder and the next one")
	assert.Equal(t, Holder{Index: 3, URL: bases[3], PID: 102, Lock: lock7}, hs[0])
	assert.Equal(t, Holder{Index: 4, URL: bases[4], PID: 103, Lock: lock7Next}, hs[1])
	assert.Less(t, time.Since(start), 2*time.Second, "a stopped instance costs the context's bound, no more")

	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	h, ok := FindHolder(ctx2, http.DefaultClient, bases, 7)
	require.True(t, ok)
	assert.Equal(t, 3, h.Index)
	_, ok = FindHolder(ctx2, http.DefaultClient, bases, 9)
	assert.False(t, ok, "nobody holds item 9's lock")
}

func TestAwaitHolder(t *testing.T) {
	lock := HeldLock{Name: "item:1", ItemID: 1, Token: 1, RedisKey: "k"}
	taken := make(chan struct{})
	late := instance(t, 7, func() []HeldLock {
		select {
		case <-taken:
			return []HeldLock{lock}
		default:
			return nil
		}
	})
	time.AfterFunc(150*time.Millisecond, func() { close(taken) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The instance shows the holder only once taken is closed, after its first answers: found,
	// it kept asking until the holder appeared. (A bound on the time it took, as before, failed
	// a loaded run: its 150 ms timer had started before the clock was read, 2 ms earlier.)
	h, ok := AwaitHolder(ctx, http.DefaultClient, []string{late.URL}, 1, 10*time.Millisecond)
	require.True(t, ok)
	assert.Equal(t, 7, h.PID)

	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	_, ok = AwaitHolder(short, http.DefaultClient, []string{late.URL}, 2, 10*time.Millisecond)
	assert.False(t, ok, "item 2's lock is never held: the wait ends with its context")
}

func TestGetLocksNotDemo(t *testing.T) {
	_, err := GetLocks(context.Background(), http.DefaultClient, notDemo(t).URL)
	require.ErrorIs(t, err, ErrNotDemo)
	l, err := GetLocks(context.Background(), http.DefaultClient, instance(t, 5, holding()).URL)
	require.NoError(t, err)
	assert.Equal(t, 5, l.PID)
}

func TestGetJSONError(t *testing.T) {
	var out any
	err := GetJSON(context.Background(), http.DefaultClient, notDemo(t).URL, "/anything", &out)
	var ae *Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, Error{Status: 404, Code: "not_found", Message: "debug endpoints need --demo"}, *ae)

	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer plain.Close()
	err = GetJSON(context.Background(), http.DefaultClient, plain.URL, "/x", &out)
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "http_502", ae.Code)
}

// TestHeldLockMatchesTheServer: what the storefront writes for a held lock reads back whole.
func TestHeldLockMatchesTheServer(t *testing.T) {
	server := inventory.HeldLock{Name: "item:3", ItemID: 3, Token: 42, RedisKey: "stockguard:lock:{item:3}", FenceKey: "stockguard:lock:{item:3}:fence"}
	b, err := json.Marshal(server)
	require.NoError(t, err)
	var got HeldLock
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, HeldLock(server), got)
}

func TestStrategies(t *testing.T) {
	serve := func(body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	ctx := context.Background()
	list, err := Strategies(ctx, http.DefaultClient, serve(`[
		{"name":"lock","safe":false,"takes_lock":true,"default":false,"demo_only":false},
		{"name":"guard","safe":true,"takes_lock":false,"default":true,"demo_only":false},
		{"name":"setnx-expire","safe":false,"takes_lock":true,"demo_only":true,"redis_key_prefix":"p:setnx:"}]`))
	require.NoError(t, err)
	require.Len(t, list, 3)
	assert.Equal(t, Strategy{Name: "lock", TakesLock: true}, list[0])
	s, ok := Find(list, "setnx-expire")
	require.True(t, ok)
	assert.Equal(t, Strategy{Name: "setnx-expire", TakesLock: true, DemoOnly: true, RedisKeyPrefix: "p:setnx:"}, s)
	_, ok = Find(list, "naive")
	assert.False(t, ok)

	_, err = Strategies(ctx, http.DefaultClient, serve(`[{"name":"lock","safe":false}]`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `strategy "lock" does not say whether it takes a lock`)
	_, err = Strategies(ctx, http.DefaultClient, serve(`[{"safe":false,"takes_lock":false}]`))
	require.Error(t, err)
	_, err = Strategies(ctx, http.DefaultClient, notDemo(t).URL)
	var ae *Error
	require.True(t, errors.As(err, &ae))
}

// TestStillHeld takes a real lock on a real redis-server: held (with its lease left) while its
// holder has it, not once released, and not for the old holder once another took it (a newer
// token).
func TestStillHeld(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const prefix = "storeapi-test:"
	lc := locking.New(rdb, &locking.Options{KeyPrefix: prefix, Lease: time.Second})
	defer lc.Close()
	keys := locking.KeysOf(prefix, "item:1")
	held := func(l *locking.Lock) HeldLock {
		return HeldLock{Name: "item:1", ItemID: 1, Token: l.Token(), RedisKey: keys.Hash, FenceKey: keys.Fence}
	}
	first, err := lc.Obtain(ctx, "item:1")
	require.NoError(t, err)
	h1 := held(first)
	assert.True(t, StillHeld(ctx, rdb, h1))
	left, ok := LeaseLeft(ctx, rdb, h1)
	assert.True(t, ok)
	assert.True(t, left > 0 && left <= time.Second, "the lease left: %s", left)
	require.NoError(t, first.Release(ctx))
	assert.False(t, StillHeld(ctx, rdb, h1), "released")
	_, ok = LeaseLeft(ctx, rdb, h1)
	assert.False(t, ok, "released")

	second, err := lc.Obtain(ctx, "item:1")
	require.NoError(t, err)
	defer second.Release(ctx)
	assert.True(t, StillHeld(ctx, rdb, held(second)))
	assert.False(t, StillHeld(ctx, rdb, h1), "another holder took the lock since")
	_, ok = LeaseLeft(ctx, rdb, h1)
	assert.False(t, ok, "another holder took the lock since")
	assert.False(t, StillHeld(ctx, rdb, HeldLock{RedisKey: "nope", FenceKey: "nope:fence", Token: 1}))
}
