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

var (
	// ErrNotLeader: Proclaim or Resign without a live term (etcd's
	// ErrElectionNotLeader).
	ErrNotLeader = errors.New("dlock: election: not leader")
	// ErrNoLeader: nobody leads now (etcd's ErrElectionNoLeader).
	ErrNoLeader = errors.New("dlock: election: no leader")
)

// Leader is who leads a term: its owner id, the term's fencing token, and the value it
// proclaimed in this term (HasValue false when none yet).
type Leader struct {
	Owner    string
	Token    int64
	Value    string
	HasValue bool
}

// Election is leader election on one fair lock, with etcd's concurrency.Election API:
// Campaign, Proclaim, Resign, Leader, Observe (see docs/recipes.md for the contract
// shared with the other clients).
type Election struct {
	c     *Client
	name  string
	owner string
	opts  []LockOption
	mu    sync.Mutex
	term  *Hold
}

// ValueKey is the key holding the proclaimed value of election name, in the lock
// key's slot: "{name}:proclaimed", or "name:proclaimed" when name has a hash tag.
func ValueKey(name string) string {
	if Channel(name) == "dlock:"+name {
		return name + ":proclaimed"
	}
	return "{" + name + "}:proclaimed"
}

// Election returns the election name. Its terms are bound to a connection of their
// own (BIND) by default: a leader whose process dies, or whose connection is closed,
// loses leadership at once and the next campaigner leads, instead of after its lease
// (30 s by default); WithoutBind keeps a term across connection failures, for its
// lease. Other options: WithLockDelay, WithLease (then renewed by a watchdog every
// lease/3), WithOwner (e.g. the host name; default: a fresh owner id ending in
// ":election").
func (c *Client) Election(name string, opts ...LockOption) *Election {
	opts = append([]LockOption{WithBind()}, opts...)
	o := c.lockOptions(opts)
	owner := o.owner
	if owner == "" {
		owner = c.NewOwner() + ":election"
	}
	return &Election{c: c, name: name, owner: owner, opts: append(append([]LockOption(nil), opts...), WithOwner(owner))}
}

// ResumeElection takes up a term that owner already leads (etcd's ResumeElection): a
// process that restarted with its owner id and its term's Rev (its fencing token) gets
// an Election leading that term again, renewed by a watchdog, without campaigning.
// The term must still be live: the server must hold name for owner with token rev
// (RENEW answers 1 and DLOCK.CHECK name rev answers 1), else ErrNotLeader. A term
// bound to a connection (BIND, the default) ended with that connection, so only a term
// taken WithoutBind can be resumed; the resumed term is not bound. opts are the
// Election's (WithLease, WithLockDelay).
func (c *Client) ResumeElection(ctx context.Context, name, owner string, rev int64, opts ...LockOption) (*Election, error) {
	if ctx == nil {
		return nil, nilContext()
	}
	if c.err != nil {
		return nil, c.err
	}
	if bad := core.CheckKey("name", name); bad != nil {
		return nil, invalid(bad)
	}
	if owner == "" {
		return nil, &InvalidArgumentError{Argument: "owner", Problem: "the owner is empty; pass the owner id of the term to resume (Election.Owner)"}
	}
	if rev <= 0 {
		return nil, &InvalidArgumentError{Argument: "rev", Problem: fmt.Sprintf("got %d; pass the term's Rev (its fencing token, above 0)", rev)}
	}
	e := c.Election(name, append(append([]LockOption(nil), opts...), WithOwner(owner), WithoutBind())...)
	o := c.lockOptions(e.opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	r := newRequest(core.Fair, name, o)
	lease := c.opts.Lease
	if o.leaseSet {
		lease = o.lease
	}
	sent := time.Now()
	n, err := c.answer(ctx, "DLOCK.RENEW", name, core.Renew(name, owner, lease))
	if err != nil && !errors.Is(err, ErrNotHeld) {
		return nil, err
	}
	if err != nil || n != 1 {
		return nil, fmt.Errorf("%w: %q holds no term of %q to resume", ErrNotLeader, owner, name)
	}
	if live, err := c.answer(ctx, "DLOCK.CHECK", name, core.Check(name, rev)); err != nil {
		return nil, err
	} else if live != 1 {
		return nil, fmt.Errorf("%w: the term %d of %q is not live (another term began)", ErrNotLeader, rev, name)
	}
	h := c.newHold(r, owner, rev, lease, true, sent, nil)
	e.mu.Lock()
	e.term = h
	e.mu.Unlock()
	return e, nil
}

// answer sends one command bounded by ctx and CommandTimeout and reads its integer.
func (c *Client) answer(ctx context.Context, command, key string, args []any) (int64, error) {
	cmd, err := c.call(ctx, nil, args, c.bound(ctx), nil)
	if err != nil {
		return 0, &ConnectionError{Command: command, Key: key, err: err}
	}
	n, err := cmd.Int64()
	if err != nil && !isReply(err) {
		return 0, &ConnectionError{Command: command, Key: key, err: err}
	}
	return n, classify(command, key, err)
}

// Key is the election's lock key.
func (e *Election) Key() string { return e.name }

// Owner is this campaigner's owner id.
func (e *Election) Owner() string { return e.owner }

// Rev is the current term's fencing token (0 without a term): like etcd's Rev, greater
// for every later term.
func (e *Election) Rev() int64 {
	if t := e.Term(); t != nil {
		return t.Token()
	}
	return 0
}

// Term is the current term's hold (nil when not leading): its Done channel closes when
// leadership is over — the lost signal, like etcd's Session.Done.
func (e *Election) Term() *Hold {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

// Done is closed when the current term ends (a closed channel when there is none).
func (e *Election) Done() <-chan struct{} {
	if t := e.Term(); t != nil {
		return t.Done()
	}
	c := make(chan struct{})
	close(c)
	return c
}

// Campaign waits, in FIFO order on the server, until this campaigner leads, then
// proclaims val. When ctx ends first, nothing is held and the queue place is given up.
// A campaigner that already leads proclaims val in its current term.
func (e *Election) Campaign(ctx context.Context, val string) error {
	if ctx == nil {
		return nilContext()
	}
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t != nil && t.Err() == nil {
		return e.Proclaim(ctx, val)
	}
	o := e.c.lockOptions(e.opts)
	r := newRequest(core.Fair, e.name, o)
	if o.leaseSet {
		r.o.renew = true
	}
	h, err := e.c.acquire(ctx, r, true)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.term = h
	e.mu.Unlock()
	// The term's hold hears the lock's notifications through the Client's subscriber
	// connection: a term the server ends (force-release, its BIND connection closed,
	// deletion) closes Done at once.
	_ = e.c.do(ctx, "PUBLISH", Channel(e.name), "elected").Err()
	return e.Proclaim(ctx, val)
}

// subscribe subscribes to the election's channel (sharded in a cluster).
func (e *Election) subscribe(ctx context.Context) *redis.PubSub {
	if _, ok := e.c.rdb.(*redis.ClusterClient); ok {
		return e.c.rdb.SSubscribe(ctx, Channel(e.name))
	}
	return e.c.rdb.Subscribe(ctx, Channel(e.name))
}

// Proclaim stores val as the leader's value, only while this term is live
// (DLOCK.FENCED), and tells observers. ErrNotLeader without a live term.
func (e *Election) Proclaim(ctx context.Context, val string) error {
	t := e.Term()
	if t == nil || t.Err() != nil {
		return ErrNotLeader
	}
	_, err := t.Fenced(ctx, "HSET", ValueKey(e.name), "token", t.Token(), "owner", e.owner, "value", val)
	if errors.Is(err, ErrFenced) {
		t.lose(core.NotHeld, "a proclaim was refused with FENCED", err)
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	if err != nil {
		return err
	}
	return e.c.do(ctx, "PUBLISH", Channel(e.name), "proclaimed").Err()
}

// Resign ends the term: the proclaimed value is deleted (fenced) and the lock handed
// to the next campaigner at once. ErrNotLeader when the term was already lost (or
// there is none).
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	t := e.term
	e.term = nil
	e.mu.Unlock()
	if t == nil {
		return ErrNotLeader
	}
	_, _ = t.Fenced(ctx, "DEL", ValueKey(e.name))
	u, err := t.Unlock(ctx)
	if err != nil {
		return err
	}
	if u == Lost {
		return fmt.Errorf("%w: the term was already lost", ErrNotLeader)
	}
	return nil
}

// Leader reads who leads now from the server. ErrNoLeader when nobody does.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	vals, err := e.c.do(ctx, "HGETALL", ValueKey(e.name)).Result()
	if err != nil && err != redis.Nil {
		return Leader{}, err
	}
	hash := core.AsMap(vals)
	infoV, err := e.c.do(ctx, "DLOCK.INFO", e.name).Result()
	if err == redis.Nil {
		return Leader{}, ErrNoLeader
	}
	if err != nil {
		return Leader{}, classify("DLOCK.INFO", e.name, err)
	}
	info := core.AsMap(infoV)
	holders, _ := info["holders"].([]any)
	for _, hv := range holders {
		h := core.AsMap(hv)
		if _, delayed := h["delayed"]; delayed {
			continue
		}
		l := Leader{Owner: core.Str(h["owner"]), Token: core.Num(h["token"])}
		if l.Token == 0 {
			l.Token = core.Num(info["token"])
		}
		if v, ok := hash["value"]; ok && core.Num(hash["token"]) == l.Token {
			l.Value, l.HasValue = core.Str(v), true
		}
		return l, nil
	}
	return Leader{}, ErrNoLeader
}

// Observe delivers the leader now and at every change (driven by the lock's
// notifications, not polling), until ctx ends; then the channel is closed. A leader
// is delivered with the value it proclaimed (HasValue is true), never before it; a
// zero Leader (Owner "") means nobody leads.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	go func() {
		defer close(out)
		ps := e.subscribe(ctx)
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			return
		}
		msgs := ps.Channel()
		var last *Leader
		for {
			l, err := e.Leader(ctx)
			if err != nil && !errors.Is(err, ErrNoLeader) {
				if ctx.Err() != nil {
					return
				}
				l = Leader{}
			}
			// A leader is shown with its value (as etcd does): a new leader that has
			// not proclaimed yet is shown at its proclaim's notification.
			fresh := l.Owner == "" || l.HasValue
			if fresh && (last == nil || *last != l) {
				select {
				case out <- l:
				case <-ctx.Done():
					return
				}
				last = &l
			}
			select {
			case <-ctx.Done():
				return
			case _, ok := <-msgs:
				if !ok {
					return
				}
			}
		}
	}()
	return out
}
