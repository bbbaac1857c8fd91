// Package dlock is the Go client of the dlock Redis/Valkey module (libdlock.so), on
// go-redis v9: mutex, fair mutex, read-write lock, semaphore and latch with
// server-side FIFO waiting, fencing tokens, a watchdog whose lost signal is a Done
// channel, MultiLock, RedLock, and the RunOnce and Election recipes.
//
// Every call that can wait takes a context.Context: the wait happens on the server
// (the commands' WAIT option), in slices of at most Options.WaitSlice; cancelling the
// context (or passing its deadline) abandons the wait at once, gives up the queue place
// with DLOCK.CANCEL and releases a grant that raced with the cancellation.
package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/clients/go/internal/core"
)

// Options of a Client. The zero value of each field picks its default; a negative
// value, or a RenewInterval not below the Lease, is refused (every call of the
// Client then returns an *InvalidArgumentError naming the field, before sending
// anything).
type Options struct {
	// Lease of a hold taken without an explicit lease (WithLease): the watchdog
	// renews it every RenewInterval while the hold lasts. Default 30 s.
	Lease time.Duration
	// How often the watchdog renews: below Lease. Default Lease/3.
	RenewInterval time.Duration
	// The longest single server-side WAIT; longer waits are split into slices. Default
	// 4 s, and always shorter than go-redis' ReadTimeout (3 s by default, so 2.4 s):
	// ReadTimeout − max(100 ms, ReadTimeout/5) — the transport never times a slice out.
	WaitSlice time.Duration
	// Timeout of a command sent on the client's own behalf (DLOCK.CANCEL, the release
	// of a grant that raced with a give-up, the CHECK after a notification, an Unlock
	// whose context has no deadline). Default 5 s.
	CommandTimeout time.Duration
	// The start of owner ids: "<OwnerPrefix>:<n>". Default: 16 random hex digits per
	// Client.
	OwnerPrefix string
}

// Client makes lock handles on one go-redis client: *redis.Client (single node,
// failover/Sentinel) or *redis.ClusterClient (commands go straight to the key's
// shard). It keeps one subscriber connection (per shard in a cluster) on which it
// hears at once when the server ends one of its holds. Close it when done: Close
// stops its background work.
type Client struct {
	rdb    redis.UniversalClient
	opts   Options
	slice  time.Duration
	err    error // bad Options, returned by every call
	prefix string
	seq    atomic.Uint64
	notes  *notifier

	bgMu   sync.Mutex
	bg     sync.WaitGroup
	closed bool
	quit   chan struct{}
}

// New returns a Client on rdb. The go-redis client stays the caller's (Close it there,
// after the Client's Close).
func New(rdb redis.UniversalClient, opts ...Options) *Client {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	var bad *core.Invalid
	switch {
	case o.Lease < 0:
		bad = core.CheckLease("Options.Lease", o.Lease)
	case o.RenewInterval < 0:
		bad = &core.Invalid{Argument: "Options.RenewInterval", Problem: fmt.Sprintf("got %s; it must be above 0 and below the lease (0: a third of it)", o.RenewInterval)}
	}
	if o.Lease == 0 {
		o.Lease = core.DefaultLease
	}
	if bad == nil {
		bad = core.CheckLease("Options.Lease", o.Lease)
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = core.RenewInterval(o.Lease)
	}
	if bad == nil {
		if bad = core.CheckRenewInterval(o.RenewInterval, o.Lease); bad != nil {
			bad.Argument = "Options.RenewInterval"
		}
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = core.CommandTimeout
	}
	prefix := o.OwnerPrefix
	if prefix == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		prefix = hex.EncodeToString(b[:])
	}
	c := &Client{rdb: rdb, opts: o, slice: core.Slice(o.WaitSlice, readTimeout(rdb)), prefix: prefix, quit: make(chan struct{})}
	if bad != nil {
		c.err = invalid(bad)
	}
	o.WaitSlice = c.slice
	c.opts.WaitSlice = c.slice
	c.notes = newNotifier(c)
	return c
}

// NewClient is New that also returns the error of bad Options (an
// *InvalidArgumentError naming the field), before anything is sent. The Client is
// nil then.
func NewClient(rdb redis.UniversalClient, opts ...Options) (*Client, error) {
	if rdb == nil {
		return nil, &InvalidArgumentError{Argument: "rdb", Problem: "the go-redis client is nil"}
	}
	c := New(rdb, opts...)
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// Close stops the Client's background work — watchdogs, the subscriber connection,
// cancels and releases sent on its own behalf — and waits until it has stopped (a
// command stalled on the network ends at go-redis' ReadTimeout). Holds still held are
// reported lost (their leases end on the server; nothing renews them any more).
// Close is idempotent; calls made after it fail with ErrClosed.
func (c *Client) Close() error {
	c.bgMu.Lock()
	if c.closed {
		c.bgMu.Unlock()
		return nil
	}
	c.closed = true
	close(c.quit)
	c.bgMu.Unlock()
	for _, h := range c.notes.close() {
		h.lose(core.Unreachable, "the Client was closed: nothing renews the hold any more", nil)
	}
	c.bg.Wait()
	return nil
}

// spawn runs f in a goroutine that Close waits for; false (f not run) after Close.
func (c *Client) spawn(f func()) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		f()
	}()
	return true
}

func (c *Client) isClosed() bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	return c.closed
}

// Redis is the go-redis client the Client was made with.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// NewOwner returns a fresh owner id, unique to this Client: "<prefix>:<n>".
func (c *Client) NewOwner() string {
	return c.prefix + ":" + strconv.FormatUint(c.seq.Add(1), 10)
}

// readTimeout is go-redis' ReadTimeout of rdb: its 3 s default for 0, none (0) for
// -1 and -2.
func readTimeout(rdb redis.UniversalClient) time.Duration {
	var rt time.Duration
	switch r := rdb.(type) {
	case *redis.Client:
		rt = r.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = r.Options().ReadTimeout
	default:
		return 3 * time.Second
	}
	switch {
	case rt == 0:
		return 3 * time.Second
	case rt < 0:
		return 0
	}
	return rt
}

// Channel is the lock's notification channel: "dlock:"+key when the key has a hash
// tag, else "dlock:{"+key+"}" (so it hashes to the key's slot).
func Channel(key string) string { return core.Channel(key) }

// Unlock is what Unlock found (docs/clients.md, rule 3): whatever it is, the hold is
// no longer renewed.
type Unlock int

const (
	// Released: the server ended the hold (DLOCK.RELEASE answered 1).
	Released Unlock = Unlock(core.Released)
	// StillHeld: the owner still holds the lock (it took it again with the same owner,
	// WithOwner; DLOCK.RELEASE answered 0).
	StillHeld Unlock = Unlock(core.StillHeld)
	// Lost: the owner held nothing any more (lease ended, force-released, bound
	// connection closed), or the hold's loss signal had fired: whatever the hold
	// protected may have been changed by another holder meanwhile. Not an error.
	Lost Unlock = Unlock(core.Lost)
	// Unknown: the release failed on the connection, and once more on a fresh one; the
	// error (errors.Is ErrUnknown) says why. The hold is not renewed and ends at its
	// lease at the latest.
	Unknown Unlock = Unlock(core.Unknown)
)

func (u Unlock) String() string {
	switch u {
	case Released:
		return "released"
	case StillHeld:
		return "still held"
	case Lost:
		return "lost"
	case Unknown:
		return "unknown"
	}
	return "Unlock(" + strconv.Itoa(int(u)) + ")"
}

// LockOption changes how a handle acquires.
type LockOption func(*lockOpts)

type lockOpts struct {
	lease          time.Duration // explicit lease when leaseSet, else the watchdog's
	leaseSet       bool
	bind           bool
	lockDelay      time.Duration // <0: none
	replicas       int
	replicaTimeout time.Duration
	owner          string
	renew          bool     // a watchdog for an explicit lease (recipes)
	session        *Session // holds kept alive by a Session
}

// WithLease gives every hold this explicit lease (1 ms to 2^40 ms; anything else is
// refused with an *InvalidArgumentError before anything is sent) and no watchdog: the
// hold ends (and its Done channel closes) when the lease runs out unless renewed with
// Hold.Renew.
func WithLease(d time.Duration) LockOption {
	return func(o *lockOpts) { o.lease, o.leaseSet = d, true }
}

// WithBind binds each hold to a connection of its own (BIND): when that connection
// closes — the process dies, Unlock — the server ends the hold at once.
func WithBind() LockOption { return func(o *lockOpts) { o.bind = true } }

// WithoutBind undoes WithBind: the hold is not bound to a connection (the default of
// every handle but an Election's).
func WithoutBind() LockOption { return func(o *lockOpts) { o.bind = false } }

// WithLockDelay sets LOCKDELAY: a hold that ends other than by its Unlock (lease end,
// a bound connection closed) keeps excluding everyone for d more.
func WithLockDelay(d time.Duration) LockOption { return func(o *lockOpts) { o.lockDelay = d } }

// WithReplicas makes grants durable: after each grant, WAIT n timeout on the
// connection that got it; when fewer than n replicas acknowledge, the grant is
// released and the acquire fails with *NotDurableError.
func WithReplicas(n int, timeout time.Duration) LockOption {
	return func(o *lockOpts) { o.replicas, o.replicaTimeout = n, timeout }
}

// WithOwner makes every acquire of the handle use this owner id (by default each
// acquire gets a fresh one). Acquires with the same owner are reentrant: the hold
// count grows, and RWMutex upgrades and downgrades need one owner.
func WithOwner(owner string) LockOption { return func(o *lockOpts) { o.owner = owner } }

func (c *Client) lockOptions(opts []LockOption) lockOpts {
	o := lockOpts{lockDelay: -1}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// check refuses bad options before anything is sent.
func (o *lockOpts) check() error {
	if o.leaseSet {
		if bad := core.CheckLease("lease (WithLease)", o.lease); bad != nil {
			return invalid(bad)
		}
	}
	if o.lockDelay > core.MaxLease {
		return invalid(&core.Invalid{Argument: "lock delay (WithLockDelay)", Problem: fmt.Sprintf("got %s, want at most 2^40 ms", o.lockDelay)})
	}
	if o.replicas < 0 || o.replicaTimeout < 0 {
		return invalid(&core.Invalid{Argument: "replicas (WithReplicas)", Problem: fmt.Sprintf("got %d replicas and a %s timeout, want neither negative", o.replicas, o.replicaTimeout)})
	}
	return nil
}

// do sends one command whose key is args[1], routed by that key in a cluster.
func (c *Client) do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(1)
	_ = c.rdb.Process(ctx, cmd)
	return cmd
}

// run sends args (key at 1) on conn, or through the client when conn is nil.
func (c *Client) run(ctx context.Context, conn *redis.Conn, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(1)
	if conn != nil {
		_ = conn.Process(ctx, cmd)
	} else {
		_ = c.rdb.Process(ctx, cmd)
	}
	return cmd
}

// errAbandoned is call's error for a command whose answer did not come by its bound.
var errAbandoned = errors.New("dlock: no answer by the deadline")

// call sends args (key at 1) on conn (nil: the pool) and waits for the answer until
// until (zero: no bound) or ctx's end, whatever go-redis' ContextTimeoutEnabled: with
// its default (false) go-redis lets a command run past its context. A call given up
// so goes on in the background (Close waits for it) and late, when not nil, gets its
// answer; the error is then ctx's, or errAbandoned at until.
func (c *Client) call(ctx context.Context, conn *redis.Conn, args []any, until time.Time, late func(*redis.Cmd)) (*redis.Cmd, error) {
	if !until.IsZero() && !time.Now().Before(until) {
		return nil, errAbandoned
	}
	if until.IsZero() && ctx.Done() == nil {
		return c.run(ctx, conn, args), nil
	}
	// The command's own context: with ContextTimeoutEnabled go-redis ends it at the
	// bound itself; one whose late answer matters (a grant to release) is read to its end.
	rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if late == nil && !until.IsZero() {
		rctx, cancel = context.WithDeadline(rctx, until)
	}
	ch := make(chan *redis.Cmd, 1)
	if !c.spawn(func() { defer cancel(); ch <- c.run(rctx, conn, args) }) {
		cancel()
		return nil, ErrClosed
	}
	var timer <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timer = t.C
	}
	select {
	case cmd := <-ch:
		return cmd, nil
	case <-ctx.Done():
		c.giveLate(ch, late)
		return nil, ctx.Err()
	case <-timer:
		c.giveLate(ch, late)
		return nil, errAbandoned
	}
}

func (c *Client) giveLate(ch chan *redis.Cmd, late func(*redis.Cmd)) {
	if late != nil {
		c.spawn(func() { late(<-ch) })
	}
}

// bound is the bound of a command sent on the client's own behalf: CommandTimeout from
// now, or ctx's deadline when sooner.
func (c *Client) bound(ctx context.Context) time.Time {
	until := time.Now().Add(c.opts.CommandTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		return d
	}
	return until
}

// cancelLater sends DLOCK.CANCEL key owner in the background, bounded by
// CommandTimeout: the caller's deadline is never extended by it. An older module
// without the command is ignored.
func (c *Client) cancelLater(key, owner string) {
	c.spawn(func() {
		_, _ = c.call(context.Background(), nil, core.Cancel(key, owner), time.Now().Add(c.opts.CommandTimeout), nil)
	})
}

// node is the client serving key: the cluster shard's master, or the client itself.
func (c *Client) node(ctx context.Context, key string) (*redis.Client, error) {
	switch r := c.rdb.(type) {
	case *redis.Client:
		return r, nil
	case *redis.ClusterClient:
		n, err := r.MasterForKey(ctx, key)
		if err != nil {
			return nil, &ConnectionError{Command: "CLUSTER SLOTS", Key: key, err: err}
		}
		return n, nil
	}
	return nil, fmt.Errorf("dlock: BIND and durable grants need a *redis.Client or *redis.ClusterClient, got %T", c.rdb)
}
