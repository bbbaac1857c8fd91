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
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options of a Client. The zero value of each field picks its default.
type Options struct {
	// Lease of a hold taken without an explicit lease (WithLease): the watchdog
	// renews it every RenewInterval while the hold lasts. Default 30 s.
	Lease time.Duration
	// How often the watchdog renews. Default Lease/3.
	RenewInterval time.Duration
	// The longest single server-side WAIT; longer waits are split into slices so a
	// connection is never blocked longer, and never past go-redis' ReadTimeout.
	// Default 2 s (and at most ReadTimeout − 1 s).
	WaitSlice time.Duration
	// Timeout of a command sent on the client's own behalf (a release after an
	// abandoned wait, DLOCK.CANCEL, a watchdog renewal). Default 5 s.
	CommandTimeout time.Duration
	// The start of owner ids: "<OwnerPrefix>:<n>". Default: 16 random hex digits per
	// Client.
	OwnerPrefix string
}

// Client makes lock handles on one go-redis client: *redis.Client (single node,
// failover/Sentinel) or *redis.ClusterClient (commands go straight to the key's
// shard).
type Client struct {
	rdb    redis.UniversalClient
	opts   Options
	prefix string
	seq    atomic.Uint64
}

// New returns a Client on rdb. The go-redis client stays the caller's (Close it there).
func New(rdb redis.UniversalClient, opts ...Options) *Client {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.RenewInterval <= 0 {
		o.RenewInterval = o.Lease / 3
	}
	if o.WaitSlice <= 0 {
		o.WaitSlice = 2 * time.Second
	}
	if rt := readTimeout(rdb); rt > 0 {
		limit := rt - time.Second
		if limit < rt/2 {
			limit = rt / 2
		}
		if o.WaitSlice > limit {
			o.WaitSlice = limit
		}
	}
	if o.WaitSlice < time.Millisecond {
		o.WaitSlice = time.Millisecond
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = 5 * time.Second
	}
	prefix := o.OwnerPrefix
	if prefix == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		prefix = hex.EncodeToString(b[:])
	}
	return &Client{rdb: rdb, opts: o, prefix: prefix}
}

// Redis is the go-redis client the Client was made with.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// NewOwner returns a fresh owner id, unique to this Client: "<prefix>:<n>".
func (c *Client) NewOwner() string {
	return c.prefix + ":" + strconv.FormatUint(c.seq.Add(1), 10)
}

func readTimeout(rdb redis.UniversalClient) time.Duration {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ReadTimeout
	case *redis.ClusterClient:
		return r.Options().ReadTimeout
	}
	return 0
}

// Channel is the lock's notification channel: "dlock:"+key when the key has a hash
// tag, else "dlock:{"+key+"}" (so it hashes to the key's slot).
func Channel(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return "dlock:" + key
		}
	}
	return "dlock:{" + key + "}"
}

// Unlock is what Unlock found.
type Unlock int

const (
	// Released: the hold is gone (DLOCK.RELEASE answered 1).
	Released Unlock = iota + 1
	// StillHeld: the owner still holds the lock (it took it again with the same owner,
	// WithOwner; DLOCK.RELEASE answered 0).
	StillHeld
	// Lost: the owner held nothing any more (lease ended, force-released, bound
	// connection closed): whatever the hold protected may have been changed by another
	// holder meanwhile.
	Lost
)

func (u Unlock) String() string {
	switch u {
	case Released:
		return "released"
	case StillHeld:
		return "still held"
	case Lost:
		return "lost"
	}
	return "Unlock(" + strconv.Itoa(int(u)) + ")"
}

// LockOption changes how a handle acquires.
type LockOption func(*lockOpts)

type lockOpts struct {
	lease          time.Duration // 0: watchdog
	bind           bool
	lockDelay      time.Duration // <0: none
	replicas       int
	replicaTimeout time.Duration
	owner          string
	renew          bool // a watchdog for an explicit lease (recipes)
}

// WithLease gives every hold this explicit lease and no watchdog: the hold ends (and
// its Done channel closes) when the lease runs out unless renewed with Hold.Renew.
func WithLease(d time.Duration) LockOption { return func(o *lockOpts) { o.lease = d } }

// WithBind binds each hold to a connection of its own (BIND): when that connection
// closes — the process dies, Unlock — the server ends the hold at once.
func WithBind() LockOption { return func(o *lockOpts) { o.bind = true } }

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
		f(&o)
	}
	return o
}

func ms(d time.Duration) int64 {
	m := int64((d + time.Millisecond - 1) / time.Millisecond)
	if m < 1 {
		return 1
	}
	return m
}

// do sends one command whose key is args[1], routed by that key in a cluster.
func (c *Client) do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(1)
	_ = c.rdb.Process(ctx, cmd)
	return cmd
}

// cmdCtx is a context for a command sent on the client's own behalf.
func (c *Client) cmdCtx(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return context.WithTimeout(context.WithoutCancel(parent), c.opts.CommandTimeout)
}

// cancelPlaces sends DLOCK.CANCEL key owner; an older module without it is ignored.
func (c *Client) cancelPlaces(ctx context.Context, key, owner string) {
	cctx, cancel := c.cmdCtx(ctx)
	defer cancel()
	_ = c.do(cctx, "DLOCK.CANCEL", key, owner).Err()
}

// node is the client serving key: the cluster shard's master, or the client itself.
func (c *Client) node(ctx context.Context, key string) (*redis.Client, error) {
	switch r := c.rdb.(type) {
	case *redis.Client:
		return r, nil
	case *redis.ClusterClient:
		return r.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("dlock: BIND and durable grants need a *redis.Client or *redis.ClusterClient, got %T", c.rdb)
}

func (c *Client) lost(key, reason string, cause error) error {
	return &LostError{Key: key, Reason: reason, cause: cause}
}
