package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hold is one granted hold: its fencing token, and a Done channel that is closed when
// the hold ends — by Unlock (Err is nil then) or lost (Err is a *LostError): a
// renewal answered 0, no renewal got through before the lease would end, or an
// explicit lease ran out. Like etcd's Session.Done.
type Hold struct {
	c        *Client
	r        *request
	owner    string
	token    int64
	lease    time.Duration
	watchdog bool
	conn     *redis.Conn // the bound connection (BIND), else nil

	interval time.Duration // watchdog renewal interval

	done     chan struct{}
	mu       sync.Mutex
	err      error
	ended    bool
	unlocked bool
	leaseEnd time.Time
	timer    *time.Timer
}

// drift is what the client takes off a lease for clock rate differences and
// scheduling: 1 % + 2 ms.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

func (c *Client) newHold(r *request, owner string, token int64, lease time.Duration, watchdog bool, anchor time.Time, conn *redis.Conn) *Hold {
	h := &Hold{c: c, r: r, owner: owner, token: token, lease: lease, watchdog: watchdog, conn: conn,
		done: make(chan struct{}), interval: c.opts.RenewInterval}
	if lease != c.opts.Lease {
		h.interval = lease / 3
	}
	// One timer per hold, no goroutine: it fires for the next renewal (watchdog) or at
	// the lease's end, whichever comes first.
	h.mu.Lock()
	h.leaseEnd = anchor.Add(lease - drift(lease))
	h.timer = time.AfterFunc(h.nextLocked(), h.tick)
	h.mu.Unlock()
	return h
}

func (h *Hold) nextLocked() time.Duration {
	untilEnd := time.Until(h.leaseEnd)
	if h.watchdog && h.interval < untilEnd {
		return h.interval
	}
	return untilEnd
}

// tick renews (watchdog) or ends the hold when its lease is over.
func (h *Hold) tick() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	if !time.Now().Before(h.leaseEnd) {
		h.mu.Unlock()
		h.leaseRanOut()
		return
	}
	if !h.watchdog {
		h.timer.Reset(h.nextLocked())
		h.mu.Unlock()
		return
	}
	lease, interval := h.lease, h.interval
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), interval)
	sent := time.Now()
	n, err := h.c.run(ctx, nil, []any{"DLOCK.RENEW", h.r.key, h.owner, "PX", ms(lease)}).Int64()
	cancel()
	if err == nil && n != 1 {
		h.end(h.c.lost(h.r.key, "a renewal answered 0: the server holds nothing for this owner", ErrNotHeld))
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	if err == nil {
		h.leaseEnd = sent.Add(lease - drift(lease))
	}
	// On an error: again after the interval; the lease's end ends the hold when no
	// renewal gets through in time.
	h.timer.Reset(h.nextLocked())
}

// Token is the hold's fencing token: greater than every token handed out before for
// the key.
func (h *Hold) Token() int64 { return h.token }

// Key is the lock key.
func (h *Hold) Key() string { return h.r.key }

// Owner is the owner id the hold was granted to.
func (h *Hold) Owner() string { return h.owner }

// Done is closed when the hold ends: unlocked, or lost (see Err).
func (h *Hold) Done() <-chan struct{} { return h.done }

// Err is nil while the hold lasts and after its Unlock; a *LostError (errors.Is
// ErrLost) once it was lost.
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended && time.Now().After(h.leaseEnd) {
		// A paused process sees itself lost on its first look, before its timer runs.
		h.mu.Unlock()
		h.leaseRanOut()
		h.mu.Lock()
	}
	return h.err
}

// Lost reports whether the hold was lost.
func (h *Hold) Lost() bool { return h.Err() != nil }

// Context returns a context derived from parent that is cancelled when the hold ends
// (its cause is the hold's Err when lost). Call cancel when done with it.
func (h *Hold) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-h.done:
			err := h.Err()
			if err == nil {
				err = errors.New("dlock: hold unlocked")
			}
			cancel(err)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// end ends the hold once: records err, stops the watchdog and timer, closes Done.
func (h *Hold) end(err error) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended, h.err = true, err
	timer := h.timer
	h.mu.Unlock()
	timer.Stop()
	close(h.done)
	if err != nil && h.conn != nil && !h.isUnlocked() {
		// A lost bound hold: closing its connection ends it on the server if it is
		// still there.
		_ = h.conn.Close()
	}
}

func (h *Hold) isUnlocked() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unlocked
}

func (h *Hold) leaseRanOut() {
	h.mu.Lock()
	dog := h.watchdog
	h.mu.Unlock()
	reason := "its lease ran out"
	if dog {
		reason = "no renewal got through before the lease would end"
	}
	h.end(h.c.lost(h.r.key, reason, nil))
}

// renewed moves the lease end after a renewal sent at sent was confirmed.
func (h *Hold) renewed(sent time.Time, lease time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.leaseEnd = sent.Add(lease - drift(lease))
	h.timer.Reset(h.nextLocked())
}

// Renew restarts the lease (of every hold of the owner on the key): lease, or the
// hold's own lease when 0. ErrNotHeld (and the hold is lost) when the server holds
// nothing for the owner.
func (h *Hold) Renew(ctx context.Context, lease time.Duration) error {
	if lease <= 0 {
		lease = h.lease
	}
	sent := time.Now()
	n, err := h.c.run(ctx, nil, []any{"DLOCK.RENEW", h.r.key, h.owner, "PX", ms(lease)}).Int64()
	if err != nil {
		return classify("DLOCK.RENEW", h.r.key, err)
	}
	if n != 1 {
		h.end(h.c.lost(h.r.key, "a renewal answered 0: the server holds nothing for this owner", ErrNotHeld))
		return fmt.Errorf("dlock: renew %q: %w", h.r.key, ErrNotHeld)
	}
	h.mu.Lock()
	h.lease = lease
	h.mu.Unlock()
	h.renewed(sent, lease)
	return nil
}

// Unlock releases the hold: Released, StillHeld (the owner took it again, WithOwner),
// or Lost (the owner held nothing any more; not an error). A second Unlock is an error.
func (h *Hold) Unlock(ctx context.Context) (Unlock, error) {
	h.mu.Lock()
	if h.unlocked {
		h.mu.Unlock()
		return 0, fmt.Errorf("dlock: hold of %q already unlocked", h.r.key)
	}
	h.unlocked = true
	wasLost := h.err != nil
	h.mu.Unlock()
	// Renewals and the release go through the pool: a bound hold's own connection
	// stays idle (a go-redis Conn is not for concurrent use) and is closed after.
	n, err := h.c.run(ctx, nil, h.r.releaseArgs(h.owner)).Int64()
	if h.conn != nil {
		_ = h.conn.Close()
	}
	err = classify("DLOCK.RELEASE", h.r.key, err)
	switch {
	case errors.Is(err, ErrNotHeld):
		h.end(h.c.lost(h.r.key, "the server held nothing for this owner at Unlock", ErrNotHeld))
		return Lost, nil
	case err != nil:
		h.end(h.c.lost(h.r.key, "Unlock failed", err))
		return 0, err
	case wasLost:
		return Lost, nil
	case n == 1:
		h.end(nil)
		return Released, nil
	default:
		h.end(nil)
		return StillHeld, nil
	}
}

// Check asks the server whether the hold's token is still live (DLOCK.CHECK).
func (h *Hold) Check(ctx context.Context) (bool, error) {
	n, err := h.c.do(ctx, "DLOCK.CHECK", h.r.key, h.token).Int64()
	return n == 1, classify("DLOCK.CHECK", h.r.key, err)
}

// Fenced runs one command only while the hold's token is live (DLOCK.FENCED key token
// command args...), atomically. A refusal is an *Error matching ErrFenced. In a
// cluster, the command's keys must share the lock key's slot.
func (h *Hold) Fenced(ctx context.Context, args ...any) (any, error) {
	a := append([]any{"DLOCK.FENCED", h.r.key, h.token}, args...)
	v, err := h.c.do(ctx, a...).Result()
	return v, classify("DLOCK.FENCED", h.r.key, err)
}

// discard stops the hold's watchdog and timer without releasing anything (its owner's
// holds are renewed by another Hold).
func (h *Hold) discard() {
	h.mu.Lock()
	h.unlocked = true
	h.mu.Unlock()
	h.end(nil)
	if h.conn != nil {
		_ = h.conn.Close()
	}
}

// stopWatchdog stops renewing without ending the hold (its lease timer still runs).
func (h *Hold) stopWatchdog() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended && h.watchdog {
		h.watchdog = false
		h.timer.Reset(h.nextLocked())
	}
}
