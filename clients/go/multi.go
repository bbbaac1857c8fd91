package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/dlock/dlock/clients/go/internal/core"
)

// Locker is what MultiLock takes: a Mutex (or fair Mutex) handle, or an RWMutex's
// reader or writer side (RWMutex.RLocker, RWMutex.WLocker).
type Locker interface {
	Lock(ctx context.Context) (*Hold, error)
	TryLock(ctx context.Context) (*Hold, error)
	Key() string
}

type rwSide struct {
	m    *RWMutex
	read bool
}

func (s rwSide) Key() string { return s.m.key }
func (s rwSide) Lock(ctx context.Context) (*Hold, error) {
	if s.read {
		return s.m.RLock(ctx)
	}
	return s.m.Lock(ctx)
}
func (s rwSide) TryLock(ctx context.Context) (*Hold, error) {
	if s.read {
		return s.m.TryRLock(ctx)
	}
	return s.m.TryLock(ctx)
}

// RLocker is the READ side of m as a Locker.
func (m *RWMutex) RLocker() Locker { return rwSide{m, true} }

// WLocker is the WRITE side of m as a Locker.
func (m *RWMutex) WLocker() Locker { return rwSide{m, false} }

// MultiLock takes all of several locks or none (Redisson's RedissonMultiLock). The
// locks are taken in key order, so two MultiLocks over the same keys cannot deadlock.
type MultiLock struct {
	lockers []Locker
}

// NewMultiLock returns a MultiLock over the lockers (at least one).
func NewMultiLock(lockers ...Locker) *MultiLock {
	ls := append([]Locker(nil), lockers...)
	key := func(l Locker) string {
		if l == nil {
			return ""
		}
		return l.Key()
	}
	sort.SliceStable(ls, func(i, j int) bool { return key(ls[i]) < key(ls[j]) })
	return &MultiLock{lockers: ls}
}

// MultiHold is a held MultiLock: one Hold per lock.
type MultiHold struct {
	holds []*Hold
	done  chan struct{}
	once  sync.Once
}

func newMultiHold(holds []*Hold) *MultiHold {
	m := &MultiHold{holds: holds, done: make(chan struct{})}
	for _, h := range holds {
		go func(h *Hold) {
			select {
			case <-h.Done():
				m.once.Do(func() { close(m.done) })
			case <-m.done:
			}
		}(h)
	}
	return m
}

// Holds are the holds, in key order.
func (m *MultiHold) Holds() []*Hold { return m.holds }

// Done is closed when any of the holds ends.
func (m *MultiHold) Done() <-chan struct{} { return m.done }

// Err is the first lost hold's error, nil while all last.
func (m *MultiHold) Err() error {
	for _, h := range m.holds {
		if err := h.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Reason is the first lost hold's reason, "" while all last.
func (m *MultiHold) Reason() LostReason {
	for _, h := range m.holds {
		if r := h.Reason(); r != "" {
			return r
		}
	}
	return ""
}

// Unlock releases every hold: Released when all were, Lost when any was lost,
// Unknown (with the error) when a release got no answer (StillHeld when any is still
// held by its owner).
func (m *MultiHold) Unlock(ctx context.Context) (Unlock, error) {
	out := Released
	var errs []error
	for i := len(m.holds) - 1; i >= 0; i-- {
		u, err := m.holds[i].Unlock(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		switch {
		case u == Unknown, u == Lost && out != Unknown, u == StillHeld && out == Released:
			out = u
		case u == 0 && out == Released:
			out = Unknown
		}
	}
	m.once.Do(func() { close(m.done) })
	return out, errors.Join(errs...)
}

func (ml *MultiLock) take(ctx context.Context, try bool) (*MultiHold, error) {
	if ctx == nil {
		return nil, nilContext()
	}
	if len(ml.lockers) == 0 {
		return nil, &InvalidArgumentError{Argument: "lockers", Problem: "a MultiLock of no locks; NewMultiLock needs at least one"}
	}
	for i, l := range ml.lockers {
		if l == nil {
			return nil, &InvalidArgumentError{Argument: "lockers", Problem: fmt.Sprintf("locker %d is nil", i)}
		}
	}
	holds := make([]*Hold, 0, len(ml.lockers))
	for _, l := range ml.lockers {
		var h *Hold
		var err error
		if try {
			h, err = l.TryLock(ctx)
		} else {
			h, err = l.Lock(ctx)
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			for _, got := range holds {
				_, _ = got.Unlock(rctx)
			}
			cancel()
			return nil, err
		}
		holds = append(holds, h)
	}
	return newMultiHold(holds), nil
}

// Lock waits for every lock, in key order; on an error (or ctx's end) it releases
// those it took.
func (ml *MultiLock) Lock(ctx context.Context) (*MultiHold, error) { return ml.take(ctx, false) }

// TryLock takes every lock without waiting, or none (ErrNotAcquired).
func (ml *MultiLock) TryLock(ctx context.Context) (*MultiHold, error) { return ml.take(ctx, true) }

// RedLock is the Redlock algorithm over N independent servers (one Client each): a
// grant counts when a majority (N/2+1) granted within the lease.
type RedLock struct {
	clients []*Client
	key     string
	lease   time.Duration
}

// NewRedLock returns a RedLock on key over the clients, with this lease (no watchdog:
// use Extend).
func NewRedLock(clients []*Client, key string, lease time.Duration) *RedLock {
	return &RedLock{clients: clients, key: key, lease: lease}
}

// RedLockHold is a majority grant: its owner, the token each server gave (0 where none),
// and Done, closed when the validity runs out or the hold ends.
type RedLockHold struct {
	r      *RedLock
	owner  string
	tokens []int64
	mu     sync.Mutex
	until  time.Time
	timer  *time.Timer
	done   chan struct{}
	once   sync.Once
}

// Owner is the owner id of the grant (the same on every server).
func (h *RedLockHold) Owner() string { return h.owner }

// Tokens is each server's fencing token, 0 where that server did not grant.
func (h *RedLockHold) Tokens() []int64 { return h.tokens }

// Validity is when the majority's leases end at the earliest (minus drift).
func (h *RedLockHold) Validity() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until
}

// Done is closed when the validity runs out or after Unlock.
func (h *RedLockHold) Done() <-chan struct{} { return h.done }

func (h *RedLockHold) close() { h.once.Do(func() { close(h.done) }) }

// each runs f on every server at once and waits for all.
func (r *RedLock) each(f func(i int, c *Client)) {
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Add(1)
		go func() { defer wg.Done(); f(i, c) }()
	}
	wg.Wait()
}

func (r *RedLock) quorum() int { return core.Quorum(len(r.clients)) }

// TryLock makes one attempt: DLOCK.ACQUIRE on every server (no waiting); on fewer than
// a majority, or no validity left, it releases what it got: ErrNotAcquired.
func (r *RedLock) TryLock(ctx context.Context) (*RedLockHold, error) {
	if len(r.clients) == 0 {
		return nil, errors.New("dlock: RedLock over no servers")
	}
	owner := r.clients[0].NewOwner()
	tokens := make([]int64, len(r.clients))
	errs := make([]error, len(r.clients))
	start := time.Now()
	r.each(func(i int, c *Client) {
		tok, err := c.do(ctx, "DLOCK.ACQUIRE", r.key, owner, "PX", core.Ms(r.lease)).Int64()
		tokens[i], errs[i] = tok, classify("DLOCK.ACQUIRE", r.key, err)
	})
	got := 0
	for _, t := range tokens {
		if t > 0 {
			got++
		}
	}
	until := start.Add(r.lease - core.Margin(r.lease))
	if got < r.quorum() || !time.Now().Before(until) {
		r.release(context.WithoutCancel(ctx), owner)
		for _, err := range errs {
			if err != nil && err.Error() != "redis: nil" {
				return nil, fmt.Errorf("dlock: RedLock %q: %d of %d servers granted: %w", r.key, got, len(r.clients), err)
			}
		}
		return nil, fmt.Errorf("dlock: RedLock %q: %d of %d servers granted, %d needed: %w", r.key, got, len(r.clients), r.quorum(), ErrNotAcquired)
	}
	h := &RedLockHold{r: r, owner: owner, tokens: tokens, until: until, done: make(chan struct{})}
	h.timer = time.AfterFunc(time.Until(until), h.close)
	return h, nil
}

// Lock retries TryLock with a random pause until it succeeds or ctx ends.
func (r *RedLock) Lock(ctx context.Context) (*RedLockHold, error) {
	start := time.Now()
	for {
		h, err := r.TryLock(ctx)
		if err == nil || !errors.Is(err, ErrNotAcquired) {
			return h, err
		}
		pause := time.Duration(5+rand.IntN(45)) * time.Millisecond
		select {
		case <-ctx.Done():
			return nil, waitErr(r.key, time.Since(start), ctx.Err(), nil)
		case <-time.After(pause):
		}
	}
}

func (r *RedLock) release(ctx context.Context, owner string) int {
	n := 0
	var mu sync.Mutex
	r.each(func(i int, c *Client) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CommandTimeout)
		defer cancel()
		if v, err := c.do(cctx, "DLOCK.RELEASE", r.key, owner).Int64(); err == nil && v == 1 {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	return n
}

// Extend renews the lease on every server; it keeps the hold when a majority renewed
// in time, else the hold is over (ErrNotHeld, Done closed).
func (h *RedLockHold) Extend(ctx context.Context) error {
	r := h.r
	start := time.Now()
	var mu sync.Mutex
	n := 0
	r.each(func(i int, c *Client) {
		if v, err := c.do(ctx, "DLOCK.RENEW", r.key, h.owner, "PX", core.Ms(r.lease)).Int64(); err == nil && v == 1 {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	until := start.Add(r.lease - core.Margin(r.lease))
	if n < r.quorum() || !time.Now().Before(until) {
		h.close()
		return fmt.Errorf("dlock: RedLock %q: %d of %d servers renewed: %w", r.key, n, len(r.clients), ErrNotHeld)
	}
	h.mu.Lock()
	h.until = until
	h.timer.Reset(time.Until(until))
	h.mu.Unlock()
	return nil
}

// Unlock releases on every server: Released when the majority still held it, else Lost.
func (h *RedLockHold) Unlock(ctx context.Context) (Unlock, error) {
	h.timer.Stop()
	valid := time.Now().Before(h.Validity())
	n := h.r.release(ctx, h.owner)
	h.close()
	if n >= h.r.quorum() && valid {
		return Released, nil
	}
	return Lost, nil
}
