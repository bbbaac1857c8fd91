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

// Session is one keepalive for many holds, like etcd's concurrency.Session: the locks
// taken through its handles (Session.Mutex, FairMutex, RWMutex, NewLocker) have the
// session's TTL as their lease and no watchdog of their own; one goroutine renews them
// all every TTL/3, in one pipelined round trip. Done is closed when the session ends:
// by Close (which releases its holds, as revoking an etcd lease deletes its keys), or
// when no keepalive round was acknowledged before the session's lease clock ran out
// (Err is then a *LostError, LostUnreachable) — at which instant its holds are lost
// too. A hold the server ends on its own (force-release, DEL) is lost alone.
type Session struct {
	c    *Client
	ttl  time.Duration
	done chan struct{}

	mu         sync.Mutex
	holds      map[*Hold]struct{}
	validUntil time.Time
	ended      bool
	err        error
	expiry     *time.Timer
	wake       chan struct{}
}

// SessionOption changes a Session.
type SessionOption func(*Session)

// WithTTL is the session's lease (default: the Client's Options.Lease, 30 s): each of
// its holds is kept until TTL after the last acknowledged keepalive at the latest.
func WithTTL(ttl time.Duration) SessionOption { return func(s *Session) { s.ttl = ttl } }

// NewSession starts a session: it checks the server answers (PING) and starts the
// keepalive. Close it when done.
func (c *Client) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	if ctx == nil {
		return nil, nilContext()
	}
	if c.err != nil {
		return nil, c.err
	}
	s := &Session{c: c, ttl: c.opts.Lease, done: make(chan struct{}), holds: map[*Hold]struct{}{}, wake: make(chan struct{}, 1)}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if bad := core.CheckLease("ttl (WithTTL)", s.ttl); bad != nil {
		return nil, invalid(bad)
	}
	sent := time.Now()
	cmd, err := c.call(ctx, nil, []any{"PING"}, c.bound(ctx), nil)
	if err == nil {
		err = cmd.Err()
	}
	if err != nil {
		return nil, &ConnectionError{Command: "PING", Key: "", err: err}
	}
	s.mu.Lock()
	s.validUntil = core.ValidUntil(sent, s.ttl)
	s.expiry = time.AfterFunc(time.Until(s.validUntil), s.expire)
	s.mu.Unlock()
	if !c.spawn(s.keepalive) {
		s.expiry.Stop()
		return nil, ErrClosed
	}
	return s, nil
}

// TTL is the session's lease.
func (s *Session) TTL() time.Duration { return s.ttl }

// Until is when the session ends at the latest on its lease clock, unless a keepalive
// round is acknowledged before.
func (s *Session) Until() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// Done is closed when the session ends (Close, or its keepalive did not get through).
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lasts and after Close; a *LostError (LostUnreachable)
// when its keepalive did not get through in time.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Mutex is a handle on the mutex at key whose holds this session keeps alive.
func (s *Session) Mutex(key string, opts ...LockOption) *Mutex {
	return s.c.Mutex(key, append(opts, s.option())...)
}

// FairMutex is a handle on the fair mutex at key whose holds this session keeps alive.
func (s *Session) FairMutex(key string, opts ...LockOption) *Mutex {
	return s.c.FairMutex(key, append(opts, s.option())...)
}

// RWMutex is a handle on the read-write lock at key whose holds this session keeps
// alive.
func (s *Session) RWMutex(key string, opts ...LockOption) *RWMutex {
	return s.c.RWMutex(key, append(opts, s.option())...)
}

func (s *Session) option() LockOption { return func(o *lockOpts) { o.session = s } }

// Close ends the session: stops its keepalive and releases every hold it keeps (each
// Hold's Done closes, Err nil). Idempotent.
func (s *Session) Close() error {
	holds := s.end(nil)
	ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.CommandTimeout)
	defer cancel()
	var errs []error
	for _, h := range holds {
		if _, err := h.Unlock(ctx); err != nil && !errors.Is(err, errAlreadyUnlocked) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// end ends the session once, with err (nil: closed), and returns its holds.
func (s *Session) end(err error) []*Hold {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil
	}
	s.ended, s.err = true, err
	holds := make([]*Hold, 0, len(s.holds))
	for h := range s.holds {
		holds = append(holds, h)
	}
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	close(s.done)
	return holds
}

// expire fires at the session's lease clock's end: unless a round moved it, the
// session and its holds are lost.
func (s *Session) expire() {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	if time.Now().Before(s.validUntil) {
		s.expiry.Reset(time.Until(s.validUntil))
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	for _, h := range s.end(&LostError{Reason: LostUnreachable, Detail: "no keepalive of the session was acknowledged before its lease clock ran out"}) {
		h.lose(core.Unreachable, "no keepalive of its session was acknowledged before the lease clock ran out", nil)
	}
}

// add keeps h alive; false when the session has ended.
func (s *Session) add(h *Hold) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.holds[h] = struct{}{}
	return true
}

func (s *Session) remove(h *Hold) {
	s.mu.Lock()
	delete(s.holds, h)
	s.mu.Unlock()
}

func (s *Session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// keepalive renews every hold of the session every TTL/3, in one pipeline (a PING
// when it has none), until the session or the Client ends.
func (s *Session) keepalive() {
	interval := core.RenewInterval(s.ttl)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.done:
			return
		case <-s.c.quit:
			s.end(nil)
			return
		}
		s.round()
		t.Reset(interval)
	}
}

// round is one keepalive: RENEW of every hold (PING when none), bounded by the
// session's lease clock.
func (s *Session) round() {
	s.mu.Lock()
	holds := make([]*Hold, 0, len(s.holds))
	for h := range s.holds {
		holds = append(holds, h)
	}
	until := s.validUntil
	s.mu.Unlock()
	sent := time.Now()
	cmds := make([]*redis.Cmd, 0, len(holds)+1)
	done := make(chan error, 1)
	ok := s.c.spawn(func() {
		ctx, cancel := context.WithDeadline(context.Background(), until)
		defer cancel()
		pipe := s.c.rdb.Pipeline()
		if len(holds) == 0 {
			cmds = append(cmds, redis.NewCmd(ctx, "PING"))
		}
		for _, h := range holds {
			cmd := redis.NewCmd(ctx, core.Renew(h.r.key(), h.owner, s.ttl)...)
			cmd.SetFirstKeyPos(1)
			cmds = append(cmds, cmd)
		}
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		_, err := pipe.Exec(ctx)
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		done <- err
	})
	if !ok {
		return
	}
	wait := time.NewTimer(time.Until(until))
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
		return // the session's own timer ends it
	case <-s.done:
		return
	}
	now, all := time.Now(), true
	for i, h := range holds {
		n, err := cmds[i].Int64()
		switch {
		case err == nil && n == 1:
			h.keptAlive(sent, s.ttl, now)
		case err == nil, isReply(err) && errors.Is(classify("DLOCK.RENEW", h.r.key(), err), ErrNotHeld):
			h.lose(core.NotHeld, "a keepalive of its session answered 0: the server holds nothing for this owner", ErrNotHeld)
		default:
			all = false
		}
	}
	if len(holds) == 0 {
		all = cmds[0].Err() == nil
	}
	if !all {
		return
	}
	s.mu.Lock()
	if !s.ended && now.Before(s.validUntil) {
		s.validUntil = core.ValidUntil(sent, s.ttl)
		s.expiry.Reset(time.Until(s.validUntil))
	}
	s.mu.Unlock()
}

// keptAlive files a session keepalive of h sent at sent and acknowledged at now.
func (h *Hold) keptAlive(sent time.Time, ttl time.Duration, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock.Acked(ttl, sent, now)
	if ended, _ := h.clock.Ended(); !ended {
		h.expiry.Reset(time.Until(h.clock.ValidUntil()))
	}
}

// NewLocker returns a sync.Locker on the mutex at key, kept alive by the session
// (etcd's concurrency.NewLocker). sync.Locker has no errors and no context: Lock waits
// as long as it takes, and like etcd's it panics when the lock cannot be taken (the
// session ended, the server refused) or released. Use Session.Mutex for errors and
// deadlines.
func NewLocker(s *Session, key string) sync.Locker {
	return &locker{m: s.Mutex(key)}
}

type locker struct {
	m  *Mutex
	mu sync.Mutex
	h  *Hold
}

func (l *locker) Lock() {
	h, err := l.m.Lock(context.Background())
	if err != nil {
		panic(fmt.Sprintf("dlock: NewLocker(%q).Lock: %v", l.m.Key(), err))
	}
	l.mu.Lock()
	l.h = h
	l.mu.Unlock()
}

func (l *locker) Unlock() {
	l.mu.Lock()
	h := l.h
	l.h = nil
	l.mu.Unlock()
	if h == nil {
		panic(fmt.Sprintf("dlock: NewLocker(%q).Unlock of an unlocked locker", l.m.Key()))
	}
	if _, err := h.Unlock(context.Background()); err != nil {
		panic(fmt.Sprintf("dlock: NewLocker(%q).Unlock: %v", l.m.Key(), err))
	}
}
