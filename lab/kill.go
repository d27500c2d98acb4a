//go:build !nodemo

package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/internal/storeapi"
	"github.com/stockguard/stockguard/inventory"
)

// Killed is a lock holder the supervisor killed with SIGKILL (kill -9): the instance, its
// process, the item and the token of the lock it held. The supervisor starts the instance
// again (a new process, the same index).
type Killed struct {
	Instance int     `json:"instance"`
	PID      int     `json:"pid"`
	Item     int64   `json:"item"`
	Token    int64   `json:"token"`
	AtMS     float64 `json:"at_ms"` // when SIGKILL was sent, Unix ms
	// LeaseEndMS is when its lock's lease ends (Unix ms), as Redis told it with the holder
	// stopped: the timeline's word for it, since the holder's own events of its acquisition
	// or last renewal may have died with it, unsent.
	LeaseEndMS float64 `json:"lease_end_ms,omitempty"`
}

// Kill finds the children holding the locks of items (asking each running child's
// /api/debug/locks), stops them with SIGSTOP, confirms in Redis that each lock is still
// theirs and reads its lease (else continues them and looks again), and kills them with
// SIGKILL, at once: one
// process holding two of the items dies once. Each killed instance is started again
// (exited). It answers ErrNotHeld when an item's lock has no holder.
func (s *Supervisor) Kill(ctx context.Context, items []int64) ([]Killed, error) {
	for range 5 {
		type found struct {
			c    *child
			held storeapi.HeldLock
			item int64
		}
		var hs []found
		for _, item := range items {
			c, held, ok := s.holder(ctx, item)
			if !ok {
				return nil, fmt.Errorf("%w: item %d", ErrNotHeld, item)
			}
			hs = append(hs, found{c, held, item})
		}
		var procs []*child // the distinct holders, in index order (the order their locks are taken in)
		for _, h := range hs {
			if !slices.Contains(procs, h.c) {
				procs = append(procs, h.c)
			}
		}
		slices.SortFunc(procs, func(a, b *child) int { return a.index - b.index })
		for _, c := range procs {
			c.mu.Lock()
		}
		unlock := func() {
			for _, c := range procs {
				c.mu.Unlock()
			}
		}
		again := false
		for _, c := range procs {
			again = again || c.paused != nil || c.url == ""
		}
		if again {
			unlock()
			continue
		}
		for _, c := range procs {
			if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				for _, d := range procs {
					_ = d.cmd.Process.Signal(syscall.SIGCONT)
				}
				unlock()
				return nil, fmt.Errorf("%w: SIGSTOP instance %d: %w", inventory.ErrUnavailable, c.index, err)
			}
		}
		for _, c := range procs { // frozen before Redis is asked (leaseLeft)
			again = again || !procutil.WaitStopped(c.cmd.Process.Pid, 2*time.Second)
		}
		leaseEnds := make([]time.Time, len(hs))
		for i, h := range hs {
			read := time.Now()
			left, ok := s.leaseLeft(ctx, h.held)
			again = again || !ok
			if left > 0 {
				leaseEnds[i] = read.Add(left)
			}
		}
		if again { // one released between the look-up and the stop
			for _, c := range procs {
				_ = c.cmd.Process.Signal(syscall.SIGCONT)
			}
			unlock()
			continue
		}
		at := time.Now()
		for _, c := range procs {
			c.expected = true
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
		}
		out := make([]Killed, len(hs))
		for i, h := range hs {
			out[i] = Killed{Instance: h.c.index, PID: h.c.cmd.Process.Pid, Item: h.item, Token: h.held.Token, AtMS: unixMS(at)}
			if !leaseEnds[i].IsZero() {
				out[i].LeaseEndMS = unixMS(leaseEnds[i])
			}
			s.log.Info("lab: killed a lock holder (SIGKILL)", "instance", h.c.index, "pid", out[i].PID, "item", h.item, "token", h.held.Token)
		}
		unlock()
		return out, nil
	}
	return nil, fmt.Errorf("%w: items %v", ErrNotHeld, items)
}

// kill answers POST /api/lab/kill {"item":N}: the instance holding item's lock is killed with
// SIGKILL, and started again.
func (l *api) kill(c *gin.Context) {
	item, ok := itemOfBody(c)
	if !ok {
		return
	}
	if l.sup == nil {
		handlers.WriteError(c, errKillUnsupported)
		return
	}
	k, err := l.sup.Kill(c.Request.Context(), []int64{item})
	if err != nil {
		handlers.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, k[0])
}

// killHolders asks the supervisor to kill the holders of items' locks as soon as each item
// has one (within 5 s); the note says why not when it does not.
func (l *api) killHolders(ctx context.Context, items []int64) ([]Killed, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		k, err := l.sup.Kill(ctx, items)
		if err == nil {
			return k, ""
		}
		if !errors.Is(err, ErrNotHeld) {
			return nil, "kill failed: " + err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, "no instance was seen holding the item's lock: the burst was over before one took it"
		case <-time.After(10 * time.Millisecond):
		}
	}
}
