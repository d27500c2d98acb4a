//go:build !nodemo

package lab

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/handlers"
	"github.com/stockguard/stockguard/internal/procutil"
	"github.com/stockguard/stockguard/inventory"
)

// The lab's lease is the instances' --lock-lease, a setting each storefront takes at start.
// A lesson that needs a longer one (the kill -9 of a holder: lock+guard takes over within
// about a second whatever the lease, lock waits it out) asks the supervisor to start its
// instances again with that lease (POST /api/lab/lease): nothing in a storefront changes its
// lease while it runs. The lock wait goes with it, so that a buyer waiting when the holder is
// killed outlives the dead holder's lease: max(--lock-wait, lease + leaseWaitMargin).

// Bounds of the lab's lease (POST /api/lab/lease).
const (
	minLabLease     = time.Second
	maxLabLease     = 30 * time.Second
	leaseWaitMargin = 3 * time.Second
)

// Lease returns the instances' lock lease now.
func (s *Supervisor) Lease() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// args returns the instances' arguments for the lease now: the configured ones, with
// --lock-lease and --lock-wait after them when the lease is not the configured one (the last
// value of a flag wins).
func (s *Supervisor) args() []string {
	lease := s.Lease()
	args := append([]string(nil), s.cfg.Args...)
	if lease == s.cfg.Lease {
		return args
	}
	return append(args, "--lock-lease", lease.String(), "--lock-wait", lessonWait(s.cfg.LockWait, lease).String())
}

// lessonWait is the lock wait of instances run with lease: long enough for a buyer waiting
// when the holder dies to see the lease run out.
func lessonWait(wait, lease time.Duration) time.Duration { return max(wait, lease+leaseWaitMargin) }

// pauseFor is how long Pause stops a holder: PauseFor scaled to the lease now (three leases
// with the command's settings).
func (s *Supervisor) pauseFor() time.Duration {
	if s.cfg.Lease <= 0 {
		return s.cfg.PauseFor
	}
	return time.Duration(float64(s.cfg.PauseFor) * float64(s.Lease()) / float64(s.cfg.Lease))
}

// SetLease starts every instance again with lease (and its lock wait, lessonWait), each
// asked to shut down first (SIGTERM, as Stop does), and returns once every one listens; it
// does nothing when the lease is already lease. A run under way loses its instances: the
// page sets the lease before a run, never during one.
func (s *Supervisor) SetLease(ctx context.Context, lease time.Duration) error {
	s.relaunch.Lock()
	defer s.relaunch.Unlock()
	s.mu.Lock()
	same := s.lease == lease
	s.lease = lease
	s.mu.Unlock()
	if same {
		return nil
	}
	s.log.Info("lab: starting the instances again with a new lease", "lease", lease, "lock_wait", lessonWait(s.cfg.LockWait, lease))
	errs := make([]error, len(s.children))
	var wg sync.WaitGroup
	for i, c := range s.children {
		wg.Go(func() {
			s.resume(c)
			c.mu.Lock()
			c.expected = true
			old, done := c.cmd, c.done
			c.mu.Unlock()
			procutil.Stop(old.Process, done, 10*time.Second)
			errs[i] = s.awaitReplaced(ctx, c, old)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// awaitReplaced waits until a process other than old runs c and listens (exited starts it).
func (s *Supervisor) awaitReplaced(ctx context.Context, c *child, old *exec.Cmd) error {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	for {
		c.mu.Lock()
		cmd, ready := c.cmd, c.ready
		c.mu.Unlock()
		if cmd != old {
			select {
			case <-ready:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("%w: lab instance %d did not listen again: %w", inventory.ErrUnavailable, c.index, ctx.Err())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: lab instance %d was not started again: %w", inventory.ErrUnavailable, c.index, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// setLease answers POST /api/lab/lease {"lease_ms":N}: the instances, started again with that
// lease, and the lease.
func (l *api) setLease(c *gin.Context) {
	var body struct {
		LeaseMS int `json:"lease_ms"`
	}
	if err := handlers.DecodeJSON(c.Request.Body, &body); err != nil {
		handlers.WriteError(c, err)
		return
	}
	if d := time.Duration(body.LeaseMS) * time.Millisecond; d < minLabLease || d > maxLabLease {
		handlers.WriteError(c, invalidField("lease_ms", "an integer from "+strconv.Itoa(int(minLabLease.Milliseconds()))+
			" to "+strconv.Itoa(int(maxLabLease.Milliseconds())), body.LeaseMS))
		return
	}
	if l.sup == nil {
		handlers.WriteError(c, errLeaseUnsupported)
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), time.Minute)
	defer cancel()
	if err := l.sup.SetLease(ctx, time.Duration(body.LeaseMS)*time.Millisecond); err != nil {
		handlers.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"lease_ms": ms(l.sup.Lease()), "instances": l.sup.Instances()})
}
