package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/clients/go/internal/core"
)

// request is one acquire: what to take (core.Spec) and how (lockOpts).
type request struct {
	spec core.Spec
	o    lockOpts
}

func newRequest(kind core.Kind, key string, o lockOpts) *request {
	return &request{spec: core.Spec{Kind: kind, Key: key, Bind: o.bind, LockDelay: o.lockDelay}, o: o}
}

func (r *request) key() string { return r.spec.Key }

// waitErr is the error of a wait that ended with its context (or its deadline).
func waitErr(key string, waited time.Duration, err, lastErr error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errAbandoned) {
		return &TimeoutError{Key: key, Waited: waited.Round(time.Millisecond).String(), LastErr: lastErr, cause: context.DeadlineExceeded}
	}
	return fmt.Errorf("dlock: wait for %q abandoned (nothing is held, no queue place kept): %w", key, err)
}

// check refuses a bad request before anything is sent.
func (c *Client) check(ctx context.Context, r *request) error {
	if ctx == nil {
		return nilContext()
	}
	if c.err != nil {
		return c.err
	}
	if bad := core.CheckKey("key", r.key()); bad != nil {
		return invalid(bad)
	}
	if err := r.o.check(); err != nil {
		return err
	}
	if c.isClosed() {
		return ErrClosed
	}
	return nil
}

// acquire takes the lock of r: once (wait false: a try) or until ctx ends. The loop's
// rules are core.Wait's; this is its I/O.
func (c *Client) acquire(ctx context.Context, r *request, wait bool) (*Hold, error) {
	try := !wait
	if err := c.check(ctx, r); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := ctx.Err(); err != nil {
		// Nothing was sent, so there is nothing to give up.
		return nil, waitErr(r.key(), 0, err, nil)
	}
	owner := r.o.owner
	if owner == "" {
		owner = c.NewOwner()
	}
	lease, watchdog := c.opts.Lease, true
	if r.o.leaseSet {
		lease, watchdog = r.o.lease, r.o.renew
	}
	if s := r.o.session; s != nil {
		if s.isEnded() {
			return nil, fmt.Errorf("dlock: the session of %q has ended: %w", r.key(), ErrClosed)
		}
		lease, watchdog = s.ttl, false
	}
	var conn *redis.Conn
	var node *redis.Client
	if r.o.bind || r.o.replicas > 0 {
		var err error
		if node, err = c.node(ctx, r.key()); err != nil {
			return nil, err
		}
		conn = node.Conn()
	}
	closeConn := func() {
		if conn != nil {
			_ = conn.Close()
			conn = nil
		}
	}
	deadline, _ := ctx.Deadline()
	w := core.NewWait(start, deadline, c.slice, try)
	sentAny := false
	// Giving up: the queue place (fair locks keep one between polls) is freed in the
	// background, never past the caller's deadline.
	giveUp := func() {
		if sentAny && (!try || r.spec.Kind == core.Fair) {
			c.cancelLater(r.key(), owner)
		}
	}
	step := w.Next(start)
	for {
		switch step.Action {
		case core.Pause:
			t := time.NewTimer(step.For)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				closeConn()
				giveUp()
				return nil, waitErr(r.key(), w.Waited(time.Now()), ctx.Err(), w.LastErr())
			}
			step = w.Next(time.Now())
			continue
		case core.TimedOut:
			closeConn()
			giveUp()
			return nil, waitErr(r.key(), w.Waited(time.Now()), context.DeadlineExceeded, w.LastErr())
		case core.NotGranted:
			closeConn()
			giveUp()
			return nil, fmt.Errorf("dlock: %q is held by another owner: %w", r.key(), ErrNotAcquired)
		case core.Failed:
			closeConn()
			giveUp()
			return nil, &ConnectionError{Command: r.spec.Kind.Command(), Key: r.key(), err: w.LastErr()}
		}
		sent := time.Now()
		sentAny = true
		bound := conn
		cmd, aerr := c.call(ctx, bound, r.spec.Acquire(owner, lease, step.WaitMs), step.Until, func(cmd *redis.Cmd) {
			// The answer to an acquire given up: a grant that raced with the give-up is
			// released at once; a fair lock's place, which a CANCEL that overtook the
			// acquire on another connection left behind, is given up again.
			if _, err := cmd.Int64(); err == nil {
				_, _ = c.call(context.Background(), bound, r.spec.Release(owner), time.Now().Add(c.opts.CommandTimeout), nil)
			} else if err == redis.Nil && r.spec.Kind == core.Fair {
				_, _ = c.call(context.Background(), nil, core.Cancel(r.key(), owner), time.Now().Add(c.opts.CommandTimeout), nil)
			}
			if bound != nil {
				_ = bound.Close()
			}
		})
		if aerr != nil {
			conn = nil // the late answer's handler closes it
			giveUp()
			if errors.Is(aerr, ErrClosed) {
				return nil, aerr
			}
			if try && errors.Is(aerr, errAbandoned) && (deadline.IsZero() || time.Now().Before(deadline)) {
				return nil, &ConnectionError{Command: r.spec.Kind.Command(), Key: r.key(),
					err: fmt.Errorf("no answer within %s (a try waits no longer; a grant that arrives later is released)", core.TryTimeout)}
			}
			return nil, waitErr(r.key(), w.Waited(time.Now()), aerr, w.LastErr())
		}
		token, err := cmd.Int64()
		now := time.Now()
		switch {
		case err == redis.Nil:
			step = w.NotGranted(now)
			continue
		case isReply(err):
			closeConn()
			if !try || r.spec.Kind == core.Fair {
				giveUp()
			}
			return nil, classify(r.spec.Kind.Command(), r.key(), err)
		case err != nil:
			if conn != nil {
				// A bound connection that failed is not used again.
				closeConn()
				conn = node.Conn()
			}
			step = w.ConnFailed(err, now)
			continue
		}
		if r.o.replicas > 0 {
			if err := c.durable(ctx, r, conn, owner); err != nil {
				closeConn()
				return nil, err
			}
		}
		if !r.o.bind {
			closeConn()
		}
		// The server's lease began at the grant, no earlier than sent; a grant that
		// came long after is re-anchored so the lease clock keeps most of the lease.
		anchor := sent
		if core.NeedsAnchor(sent, now, lease) {
			renewSent := time.Now()
			if rc, err := c.call(ctx, nil, core.Renew(r.key(), owner, lease), c.bound(ctx), nil); err == nil {
				if n, err := rc.Int64(); err == nil && n == 1 {
					anchor = renewSent
				}
			}
		}
		return c.newHold(r, owner, token, lease, watchdog, anchor, conn), nil
	}
}

// durable waits for r.o.replicas replicas to acknowledge the grant on conn (WAIT), and
// releases the grant again when too few do.
func (c *Client) durable(ctx context.Context, r *request, conn *redis.Conn, owner string) error {
	wait := []any{"WAIT", r.o.replicas, int64(r.o.replicaTimeout / time.Millisecond)}
	var acked int
	cmd, werr := c.call(ctx, conn, wait, time.Time{}, nil)
	if werr == nil {
		var n int64
		n, werr = cmd.Int64()
		acked = int(n)
	}
	if werr == nil && acked >= r.o.replicas {
		return nil
	}
	_, _ = c.call(context.Background(), conn, r.spec.Release(owner), time.Now().Add(c.opts.CommandTimeout), nil)
	if werr != nil {
		return fmt.Errorf("dlock: WAIT for replicas after the grant of %q failed (the grant was released again): %w", r.key(), werr)
	}
	return &NotDurableError{Key: r.key(), Wanted: r.o.replicas, Acked: acked}
}
