package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/clients/go/internal/core"
)

// Mutex is a handle on a mutex (DLOCK.ACQUIRE) or fair mutex (DLOCK.FAIRACQUIRE) at
// one key. It is safe for concurrent use: every Lock gets an owner id of its own
// (unless WithOwner), so two goroutines exclude each other like with sync.Mutex.
type Mutex struct {
	c    *Client
	kind core.Kind
	key  string
	o    lockOpts
}

// Mutex returns a handle on the mutex at key. Waiters are served in arrival order on
// the server.
func (c *Client) Mutex(key string, opts ...LockOption) *Mutex {
	return &Mutex{c: c, kind: core.Mutex, key: key, o: c.lockOptions(opts)}
}

// FairMutex returns a handle on the fair (FIFO) mutex at key: granted in the order
// owners first asked, also across TryLock polls (a place is kept between them).
func (c *Client) FairMutex(key string, opts ...LockOption) *Mutex {
	return &Mutex{c: c, kind: core.Fair, key: key, o: c.lockOptions(opts)}
}

// Key is the lock key.
func (m *Mutex) Key() string { return m.key }

func (m *Mutex) req() *request { return newRequest(m.kind, m.key, m.o) }

// Lock waits until the lock is granted or ctx ends (*TimeoutError at its deadline,
// wrapping context.Canceled when cancelled; nothing is held then).
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) { return m.c.acquire(ctx, m.req(), true) }

// TryLock asks once, without waiting: ErrNotAcquired when another owner holds it.
func (m *Mutex) TryLock(ctx context.Context) (*Hold, error) { return m.c.acquire(ctx, m.req(), false) }

// RWMutex is a handle on a read-write lock (DLOCK.RWACQUIRE): shared READ holds,
// exclusive WRITE holds, writers not starved by readers. To upgrade or downgrade, make
// the handle WithOwner so both holds have one owner.
type RWMutex struct {
	c   *Client
	key string
	o   lockOpts
}

// RWMutex returns a handle on the read-write lock at key.
func (c *Client) RWMutex(key string, opts ...LockOption) *RWMutex {
	return &RWMutex{c: c, key: key, o: c.lockOptions(opts)}
}

// Key is the lock key.
func (m *RWMutex) Key() string { return m.key }

func (m *RWMutex) req(kind core.Kind) *request { return newRequest(kind, m.key, m.o) }

// RLock waits for a READ hold.
func (m *RWMutex) RLock(ctx context.Context) (*Hold, error) {
	return m.c.acquire(ctx, m.req(core.Read), true)
}

// Lock waits for a WRITE hold.
func (m *RWMutex) Lock(ctx context.Context) (*Hold, error) {
	return m.c.acquire(ctx, m.req(core.Write), true)
}

// TryRLock asks once for a READ hold.
func (m *RWMutex) TryRLock(ctx context.Context) (*Hold, error) {
	return m.c.acquire(ctx, m.req(core.Read), false)
}

// TryLock asks once for a WRITE hold.
func (m *RWMutex) TryLock(ctx context.Context) (*Hold, error) {
	return m.c.acquire(ctx, m.req(core.Write), false)
}

// Semaphore is a counting semaphore of Limit permits at one key (DLOCK.SEMACQUIRE),
// with the shape of golang.org/x/sync/semaphore.Weighted: Acquire(ctx, n),
// TryAcquire(n), Release(n). The permits are held by the handle's owner id (one per
// handle unless WithOwner): one hold, leased, fenced and renewed by a watchdog while
// the handle holds any permits. Strict FIFO: a large request at the head of the queue
// is not starved by smaller ones.
type Semaphore struct {
	c     *Client
	key   string
	limit int64
	o     lockOpts
	mu    sync.Mutex
	held  int64
	hold  *Hold
}

// Semaphore returns a handle on the semaphore of limit permits at key. The limit is
// fixed when the key is created; another limit gets an error naming the one in force.
func (c *Client) Semaphore(key string, limit int64, opts ...LockOption) *Semaphore {
	o := c.lockOptions(opts)
	if o.owner == "" {
		o.owner = c.NewOwner()
	}
	return &Semaphore{c: c, key: key, limit: limit, o: o}
}

func (s *Semaphore) req(n int64) *request {
	r := newRequest(core.Semaphore, s.key, s.o)
	r.spec.Limit, r.spec.Permits = s.limit, n
	return r
}

func (s *Semaphore) check(n int64) error {
	if bad := core.CheckLimit(s.limit); bad != nil {
		return invalid(bad)
	}
	if bad := core.CheckPermits(n, s.limit); bad != nil {
		return invalid(bad)
	}
	return nil
}

// Acquire waits for n permits, or until ctx ends (then it holds none of them, and no
// queue place is kept).
func (s *Semaphore) Acquire(ctx context.Context, n int64) error {
	if err := s.check(n); err != nil {
		return err
	}
	h, err := s.c.acquire(ctx, s.req(n), true)
	if err != nil {
		return err
	}
	s.add(h, n)
	return nil
}

// TryAcquire takes n permits when they are free now (nobody waits ahead), without
// waiting; false otherwise (also on an error: TryAcquireErr says which).
func (s *Semaphore) TryAcquire(n int64) bool {
	ok, _ := s.TryAcquireErr(context.Background(), n)
	return ok
}

// TryAcquireErr is TryAcquire with a context and the error.
func (s *Semaphore) TryAcquireErr(ctx context.Context, n int64) (bool, error) {
	if ctx == nil {
		return false, nilContext()
	}
	if err := s.check(n); err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.c.opts.CommandTimeout)
	defer cancel()
	h, err := s.c.acquire(cctx, s.req(n), false)
	if errors.Is(err, ErrNotAcquired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.add(h, n)
	return true, nil
}

func (s *Semaphore) add(h *Hold, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil || s.hold.Err() != nil || s.held == 0 {
		if s.hold != nil {
			s.hold.discard()
		}
		s.hold, s.held = h, n
		return
	}
	// The owner's hold grew: one watchdog (the first hold's) renews all its permits.
	h.discard()
	s.held += n
}

// Release gives n permits back. ErrNotHeld when the handle's owner holds fewer (its
// hold was lost, or n is more than it took).
func (s *Semaphore) Release(n int64) error {
	return s.ReleaseCtx(context.Background(), n)
}

// ReleaseCtx is Release with a context.
func (s *Semaphore) ReleaseCtx(ctx context.Context, n int64) error {
	if ctx == nil {
		return nilContext()
	}
	if err := s.check(n); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd, err := s.c.call(ctx, nil, s.req(n).spec.Release(s.o.owner), s.c.bound(ctx), nil)
	if err != nil {
		return &ConnectionError{Command: "DLOCK.RELEASE", Key: s.key, err: err}
	}
	gone, err := cmd.Int64()
	if err != nil && !isReply(err) {
		return &ConnectionError{Command: "DLOCK.RELEASE", Key: s.key, err: err}
	}
	err = classify("DLOCK.RELEASE", s.key, err)
	if errors.Is(err, ErrNotHeld) {
		if s.hold != nil {
			s.hold.lose(core.NotHeld, "the server held fewer permits for this owner at Release", ErrNotHeld)
		}
		s.held = 0
		return err
	}
	if err != nil {
		return err
	}
	s.held -= n
	if gone == 1 || s.held <= 0 {
		s.held = 0
		if s.hold != nil {
			s.hold.discard()
			s.hold = nil
		}
	}
	return nil
}

// Held is how many permits the handle holds, as far as it knows.
func (s *Semaphore) Held() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Hold is the handle's current hold (its token, Done channel, Fenced), nil when it
// holds no permits.
func (s *Semaphore) Hold() *Hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hold
}

// Latch is a countdown latch at one key (DLOCK.LATCHSET, COUNTDOWN, AWAIT).
type Latch struct {
	c   *Client
	key string
}

// Latch returns a handle on the latch at key.
func (c *Client) Latch(key string) *Latch { return &Latch{c: c, key: key} }

// TrySetCount creates the latch with count when none exists at the key (true); false
// when one exists (nothing changes).
func (l *Latch) TrySetCount(ctx context.Context, count int64) (bool, error) {
	n, err := l.c.do(ctx, "DLOCK.LATCHSET", l.key, count).Int64()
	return n == 1, classify("DLOCK.LATCHSET", l.key, err)
}

// CountDown lowers the count by one and returns the new count; at 0 the latch opens
// (and every waiter is answered). 0 when there is no latch.
func (l *Latch) CountDown(ctx context.Context) (int64, error) {
	n, err := l.c.do(ctx, "DLOCK.COUNTDOWN", l.key).Int64()
	return n, classify("DLOCK.COUNTDOWN", l.key, err)
}

// IsOpen reports whether no latch exists at the key (it opened, or was never set).
func (l *Latch) IsOpen(ctx context.Context) (bool, error) {
	n, err := l.c.do(ctx, "DLOCK.AWAIT", l.key).Int64()
	if err != nil {
		return false, classify("DLOCK.AWAIT", l.key, nilIsZero(err))
	}
	return n == 1, nil
}

func nilIsZero(err error) error {
	if err != nil && err.Error() == "redis: nil" {
		return nil
	}
	return err
}

// Wait waits until the latch opens, or until ctx ends.
func (l *Latch) Wait(ctx context.Context) error {
	if ctx == nil {
		return nilContext()
	}
	if bad := core.CheckKey("key", l.key); bad != nil {
		return invalid(bad)
	}
	start := time.Now()
	deadline, hasDeadline := ctx.Deadline()
	for {
		if err := ctx.Err(); err != nil {
			return waitErr(l.key, time.Since(start), err, nil)
		}
		slice := l.c.slice
		if hasDeadline {
			if rem := time.Until(deadline); rem < slice {
				slice = rem
			}
		}
		args := []any{"DLOCK.AWAIT", l.key, "WAIT", int64(slice / time.Millisecond)}
		var until time.Time
		if hasDeadline {
			until = deadline
		}
		cmd, aerr := l.c.call(ctx, nil, args, until, nil)
		if aerr != nil {
			if errors.Is(aerr, ErrClosed) {
				return aerr
			}
			return waitErr(l.key, time.Since(start), aerr, nil)
		}
		n, err := cmd.Int64()
		switch {
		case err == nil && n == 1:
			return nil
		case err == nil:
			return fmt.Errorf("dlock: DLOCK.AWAIT %q answered %d, want 1 or nil", l.key, n)
		case err == redis.Nil:
			continue
		case isReply(err):
			return classify("DLOCK.AWAIT", l.key, err)
		}
		return &ConnectionError{Command: "DLOCK.AWAIT", Key: l.key, err: err}
	}
}
