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

// Hold is one granted hold: its fencing token, and a Done channel that is closed when
// the hold ends — by Unlock (Err is nil then) or lost (Err is a *LostError, Reason
// says why). Like etcd's Session.Done.
//
// The hold keeps a lease clock (docs/clients.md): it is valid until the last
// acknowledged ACQUIRE or RENEW was sent plus the lease, less a margin of 1 % + 50 ms.
// Done closes at that instant at the latest, from a timer of its own that no command
// in flight can hold up, and at once (within one round trip) when the server ends the
// hold — force-release, its key deleted, its BIND connection closed — as the Client
// hears the lock's notification and checks the hold.
type Hold struct {
	c       *Client
	r       *request
	owner   string
	token   int64
	conn    *redis.Conn // the bound connection (BIND), else nil
	channel string
	session *Session // keeps the hold alive, else nil

	done   chan struct{}
	mu     sync.Mutex
	clock  *core.Clock
	err    error
	expiry *time.Timer // at the lease clock's end
	renewT *time.Timer // the watchdog's next renewal
}

func (c *Client) newHold(r *request, owner string, token int64, lease time.Duration, watchdog bool, anchor time.Time, conn *redis.Conn) *Hold {
	var interval time.Duration
	if watchdog {
		interval = c.opts.RenewInterval
		if lease != c.opts.Lease {
			interval = core.RenewInterval(lease)
		}
	}
	h := &Hold{c: c, r: r, owner: owner, token: token, conn: conn, channel: Channel(r.key()),
		done: make(chan struct{}), clock: core.NewClock(anchor, lease, interval), session: r.o.session}
	if h.session != nil {
		h.clock.KeptAlive()
	}
	h.mu.Lock()
	h.expiry = time.AfterFunc(time.Until(h.clock.ValidUntil()), h.expire)
	if at, ok := h.clock.NextRenew(); ok {
		h.renewT = time.AfterFunc(time.Until(at), h.renew)
	}
	h.mu.Unlock()
	c.notes.add(h)
	if h.session != nil && !h.session.add(h) {
		h.lose(core.Unreachable, "its session ended as it was granted", nil)
	}
	return h
}

// expire fires at the lease clock's end: the hold is lost unless a renewal moved it.
func (h *Hold) expire() {
	h.mu.Lock()
	r, lost := h.clock.Expire(time.Now())
	if !lost {
		if ended, _ := h.clock.Ended(); !ended {
			h.expiry.Reset(time.Until(h.clock.ValidUntil()))
		}
	}
	h.mu.Unlock()
	if lost {
		h.ended(r, expiryDetail(r), nil)
	}
}

func expiryDetail(r core.LostReason) string {
	if r == core.Unreachable {
		return "no renewal was acknowledged before the lease clock ran out"
	}
	return "its lease ran out"
}

// renew is the watchdog: one RENEW, whose own timeout is the lease clock's end, in a
// goroutine of its own (no other hold waits for it).
func (h *Hold) renew() {
	now := time.Now()
	h.mu.Lock()
	until, ok := h.clock.StartRenewal(now)
	lease := h.clock.Lease()
	if !ok {
		h.scheduleLocked()
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	started := h.c.spawn(func() {
		outcome := core.RenewFailed
		var cause error
		cmd, err := h.c.call(context.Background(), nil, core.Renew(h.r.key(), h.owner, lease), until, nil)
		if err == nil {
			var n int64
			n, err = cmd.Int64()
			switch {
			case err == nil && n == 1:
				outcome = core.Renewed
			case err == nil, errors.Is(classify("DLOCK.RENEW", h.r.key(), err), ErrNotHeld):
				outcome, cause = core.RenewNotHeld, ErrNotHeld
			}
		}
		h.mu.Lock()
		r, lost := h.clock.Renewed(outcome, now, time.Now())
		if !lost {
			h.expiry.Reset(time.Until(h.clock.ValidUntil()))
			h.scheduleLocked()
		}
		h.mu.Unlock()
		if lost {
			detail := "a renewal answered 0: the server holds nothing for this owner"
			if r == core.Unreachable {
				detail, cause = expiryDetail(r), err
			}
			h.ended(r, detail, cause)
		}
	})
	if !started {
		h.mu.Lock()
		h.clock.Renewed(core.RenewFailed, now, time.Now())
		h.mu.Unlock()
	}
}

// scheduleLocked arms the watchdog's timer for the next renewal, if any.
func (h *Hold) scheduleLocked() {
	at, ok := h.clock.NextRenew()
	if !ok || h.renewT == nil {
		return
	}
	h.renewT.Reset(time.Until(at))
}

// notice is a message on the hold's channel ("" after a (re)subscription): the hold
// is checked at once with DLOCK.CHECK.
func (h *Hold) notice(msg string) {
	h.mu.Lock()
	check := h.clock.Notice(msg)
	h.mu.Unlock()
	if !check {
		return
	}
	started := h.c.spawn(func() {
		for {
			h.mu.Lock()
			until := h.clock.ValidUntil()
			h.mu.Unlock()
			if b := time.Now().Add(h.c.opts.CommandTimeout); b.Before(until) {
				until = b
			}
			live, failed := false, true
			if cmd, err := h.c.call(context.Background(), nil, core.Check(h.r.key(), h.token), until, nil); err == nil {
				if n, err := cmd.Int64(); err == nil {
					live, failed = n == 1, false
				}
			}
			h.mu.Lock()
			r, lost, again := h.clock.Checked(live, failed)
			h.mu.Unlock()
			if lost {
				h.ended(r, "the server ended the hold (DLOCK.CHECK answered 0 after the lock's notification)", ErrNotHeld)
			}
			if !again {
				return
			}
		}
	})
	if !started {
		h.mu.Lock()
		h.clock.Checked(true, true)
		h.mu.Unlock()
	}
}

// lose ends the hold as lost for r unless it had ended.
func (h *Hold) lose(r core.LostReason, detail string, cause error) {
	h.mu.Lock()
	first := h.clock.End(r)
	h.mu.Unlock()
	if first {
		h.ended(r, detail, cause)
	}
}

// ended finishes a hold whose clock has just ended: records the error (r "" for an
// unlock), stops the timers, closes Done, and stops listening for it.
func (h *Hold) ended(r core.LostReason, detail string, cause error) {
	var err error
	if r != "" {
		err = &LostError{Key: h.r.key(), Reason: LostReason(r), Detail: detail, cause: cause}
	}
	h.mu.Lock()
	h.err = err
	h.expiry.Stop()
	if h.renewT != nil {
		h.renewT.Stop()
	}
	unlocked := h.clock.Unlocked()
	h.mu.Unlock()
	close(h.done)
	h.c.notes.remove(h)
	if h.session != nil {
		h.session.remove(h)
	}
	if err != nil && h.conn != nil && !unlocked {
		// A lost bound hold: closing its connection ends it on the server if it is
		// still there.
		_ = h.conn.Close()
	}
}

// Token is the hold's fencing token: greater than every token handed out before for
// the key.
func (h *Hold) Token() int64 { return h.token }

// Key is the lock key.
func (h *Hold) Key() string { return h.r.key() }

// Owner is the owner id the hold was granted to.
func (h *Hold) Owner() string { return h.owner }

// Done is closed when the hold ends: unlocked, or lost (see Err and Reason).
func (h *Hold) Done() <-chan struct{} { return h.done }

// Err is nil while the hold lasts and after its Unlock; a *LostError (errors.Is
// ErrLost) once it was lost.
func (h *Hold) Err() error {
	h.mu.Lock()
	// A paused process sees itself lost on its first look, before its timer runs.
	r, lost := h.clock.Expire(time.Now())
	if !lost {
		defer h.mu.Unlock()
		return h.err
	}
	h.mu.Unlock()
	h.ended(r, expiryDetail(r), nil)
	return h.Err()
}

// Until is when the hold ends at the latest on the client's lease clock: when the last
// acknowledged ACQUIRE or RENEW was sent, plus the lease, less the margin (1 % + 50
// ms). A watchdog (or a Session) moves it at each renewal. It answers from the
// client's clock, with no round trip (DLOCK.INFO gives the server's view).
func (h *Hold) Until() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock.ValidUntil()
}

// TTL is how long the hold has left on the client's lease clock (see Until); 0 once it
// ended (unlocked or lost).
func (h *Hold) TTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if !h.clock.Held(now) {
		return 0
	}
	return h.clock.ValidUntil().Sub(now)
}

// Reason is why the hold was lost ("" while it lasts, and after its Unlock).
func (h *Hold) Reason() LostReason {
	var e *LostError
	if errors.As(h.Err(), &e) {
		return e.Reason
	}
	return ""
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

// Renew restarts the lease (of every hold of the owner on the key): lease, or the
// hold's own lease when 0. ErrNotHeld (and the hold is lost) when the server holds
// nothing for the owner.
func (h *Hold) Renew(ctx context.Context, lease time.Duration) error {
	if ctx == nil {
		return nilContext()
	}
	if lease < 0 {
		return invalid(core.CheckLease("lease", lease))
	}
	h.mu.Lock()
	if lease == 0 {
		lease = h.clock.Lease()
	}
	h.mu.Unlock()
	if bad := core.CheckLease("lease", lease); bad != nil {
		return invalid(bad)
	}
	sent := time.Now()
	cmd, err := h.c.call(ctx, nil, core.Renew(h.r.key(), h.owner, lease), time.Time{}, nil)
	if err != nil {
		return err
	}
	n, err := cmd.Int64()
	if err != nil && !isReply(err) {
		return &ConnectionError{Command: "DLOCK.RENEW", Key: h.r.key(), err: err}
	}
	if err = classify("DLOCK.RENEW", h.r.key(), err); err != nil && !errors.Is(err, ErrNotHeld) {
		return err
	}
	if err != nil || n != 1 {
		h.lose(core.NotHeld, "a renewal answered 0: the server holds nothing for this owner", ErrNotHeld)
		return fmt.Errorf("dlock: renew %q: %w", h.r.key(), ErrNotHeld)
	}
	h.mu.Lock()
	h.clock.Acked(lease, sent, time.Now())
	if ended, _ := h.clock.Ended(); !ended {
		h.expiry.Reset(time.Until(h.clock.ValidUntil()))
		h.scheduleLocked()
	}
	h.mu.Unlock()
	return nil
}

var errAlreadyUnlocked = errors.New("already unlocked")

// Unlock releases the hold: Released, StillHeld (the owner took it again, WithOwner),
// Lost (the owner held nothing any more, or the hold's loss signal had fired; not an
// error), or Unknown with an error matching ErrUnknown (the release failed on the
// connection, and again on a fresh one). Whatever it answers, the watchdog never
// renews the hold again. A release that fails on the connection is retried once; the
// release is bounded by ctx (and by CommandTimeout when ctx has no deadline). A second
// Unlock is an error.
func (h *Hold) Unlock(ctx context.Context) (Unlock, error) {
	if ctx == nil {
		return 0, nilContext()
	}
	h.mu.Lock()
	if h.clock.Unlocked() {
		h.mu.Unlock()
		return 0, fmt.Errorf("dlock: hold of %q: %w", h.r.key(), errAlreadyUnlocked)
	}
	wasLost := h.clock.Unlock() != ""
	if h.renewT != nil {
		h.renewT.Stop()
	}
	h.mu.Unlock()
	until := h.c.bound(ctx)
	u := core.NewUnlocking(wasLost)
	var res core.Result
	var last error
	for {
		var n int64
		var err error
		cmd, aerr := h.c.call(ctx, nil, h.r.spec.Release(h.owner), until, nil)
		if aerr != nil {
			err = aerr
		} else {
			n, err = cmd.Int64()
		}
		replyErr := isReply(err)
		var kind core.ErrorKind
		if replyErr {
			kind = core.Classify(err.Error())
			last = classify("DLOCK.RELEASE", h.r.key(), err)
		} else if err != nil {
			last = &ConnectionError{Command: "DLOCK.RELEASE", Key: h.r.key(), err: err}
		}
		var retry bool
		res, retry = u.Answer(n, replyErr, kind, err != nil && !replyErr)
		if !retry || aerr != nil {
			if retry {
				res = core.Unknown
			}
			break
		}
	}
	if h.conn != nil {
		_ = h.conn.Close()
	}
	switch res {
	case core.Lost:
		h.lose(core.NotHeld, "the server held nothing for this owner at Unlock", ErrNotHeld)
		return Lost, nil
	case core.Unknown:
		h.lose("", "", nil)
		return Unknown, fmt.Errorf("dlock: unlock of %q: the release got no answer, also on a fresh connection (the hold is not renewed and ends at its lease at the latest): %w: %w", h.r.key(), ErrUnknown, last)
	}
	h.lose("", "", nil)
	return Unlock(res), nil
}

// Check asks the server whether the hold's token is still live (DLOCK.CHECK).
func (h *Hold) Check(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, nilContext()
	}
	n, err := h.c.do(ctx, "DLOCK.CHECK", h.r.key(), h.token).Int64()
	return n == 1, classify("DLOCK.CHECK", h.r.key(), err)
}

// Fenced runs one command only while the hold's token is live (DLOCK.FENCED key token
// command args...), atomically. A refusal is an *Error matching ErrFenced. In a
// cluster, the command's keys must share the lock key's slot.
func (h *Hold) Fenced(ctx context.Context, args ...any) (any, error) {
	if ctx == nil {
		return nil, nilContext()
	}
	a := append([]any{"DLOCK.FENCED", h.r.key(), h.token}, args...)
	v, err := h.c.do(ctx, a...).Result()
	return v, classify("DLOCK.FENCED", h.r.key(), err)
}

// discard stops the hold's watchdog and timer without releasing anything (its owner's
// holds are renewed by another Hold).
func (h *Hold) discard() {
	h.mu.Lock()
	h.clock.Unlock()
	h.mu.Unlock()
	h.lose("", "", nil)
	if h.conn != nil {
		_ = h.conn.Close()
	}
}

// stopWatchdog stops renewing without ending the hold (its lease clock still runs).
func (h *Hold) stopWatchdog() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock.StopWatchdog()
	if h.renewT != nil {
		h.renewT.Stop()
	}
}
