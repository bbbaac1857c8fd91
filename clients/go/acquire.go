package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	cmdAcquire   = "DLOCK.ACQUIRE"
	cmdRWAcquire = "DLOCK.RWACQUIRE"
	cmdFair      = "DLOCK.FAIRACQUIRE"
	cmdSem       = "DLOCK.SEMACQUIRE"
)

// request is one acquire: the command, its key and kind-specific arguments.
type request struct {
	cmd     string
	key     string
	mode    string // READ or WRITE for rw locks
	limit   int64  // semaphore
	permits int64  // semaphore
	o       lockOpts
}

func (r *request) args(owner string, lease time.Duration, wait int64) []any {
	a := make([]any, 0, 14)
	a = append(a, r.cmd, r.key, owner)
	switch r.cmd {
	case cmdRWAcquire:
		a = append(a, r.mode)
	case cmdSem:
		a = append(a, "LIMIT", r.limit, "PERMITS", r.permits)
	}
	a = append(a, "PX", ms(lease))
	if wait > 0 {
		a = append(a, "WAIT", wait)
	}
	if r.o.bind {
		a = append(a, "BIND")
	}
	if r.o.lockDelay >= 0 {
		a = append(a, "LOCKDELAY", int64(r.o.lockDelay/time.Millisecond))
	}
	return a
}

func (r *request) releaseArgs(owner string) []any {
	switch r.cmd {
	case cmdRWAcquire:
		return []any{"DLOCK.RELEASE", r.key, owner, r.mode}
	case cmdSem:
		return []any{"DLOCK.RELEASE", r.key, owner, "PERMITS", r.permits}
	}
	return []any{"DLOCK.RELEASE", r.key, owner}
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

// waitErr is the error of a wait that ended with its context.
func waitErr(key string, start time.Time, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &TimeoutError{Key: key, Waited: time.Since(start).Round(time.Millisecond).String(), cause: err}
	}
	return fmt.Errorf("dlock: wait for %q abandoned (nothing is held, no queue place kept): %w", key, err)
}

// acquire takes the lock of r: once (wait false: WAIT 0) or until ctx ends.
func (c *Client) acquire(ctx context.Context, r *request, wait bool) (*Hold, error) {
	owner := r.o.owner
	if owner == "" {
		owner = c.NewOwner()
	}
	lease, watchdog := r.o.lease, r.o.lease <= 0 || r.o.renew
	if lease <= 0 {
		lease = c.opts.Lease
	}
	var conn *redis.Conn
	if r.o.bind || r.o.replicas > 0 {
		node, err := c.node(ctx, r.key)
		if err != nil {
			return nil, err
		}
		conn = node.Conn()
	}
	closeConn := func() {
		if conn != nil {
			_ = conn.Close()
		}
	}
	start := time.Now()
	deadline, hasDeadline := ctx.Deadline()
	for {
		slice := c.opts.WaitSlice
		if rem := time.Until(deadline); hasDeadline && rem < slice {
			slice = rem
		}
		err := ctx.Err()
		if err == nil && wait && slice < time.Millisecond {
			// Under a millisecond left: the deadline is here. A last WAIT 0 try
			// would race the context on the wire, and a grant it lost would be
			// held until its lease ran out.
			err = context.DeadlineExceeded
		}
		if err != nil {
			closeConn()
			c.cancelPlaces(ctx, r.key, owner)
			return nil, waitErr(r.key, start, err)
		}
		var w int64
		if wait {
			w = int64(slice / time.Millisecond)
		}
		sent := time.Now()
		token, abandoned, err := c.send(ctx, conn, r, owner, lease, w)
		if abandoned {
			return nil, waitErr(r.key, start, ctx.Err())
		}
		if err == redis.Nil {
			if !wait {
				if r.cmd == cmdFair {
					c.cancelPlaces(ctx, r.key, owner)
				}
				closeConn()
				return nil, fmt.Errorf("dlock: %q is held by another owner: %w", r.key, ErrNotAcquired)
			}
			continue
		}
		if err != nil {
			if wait || r.cmd == cmdFair {
				c.cancelPlaces(ctx, r.key, owner)
			}
			closeConn()
			return nil, err
		}
		if r.o.replicas > 0 {
			acked, werr := conn.Do(ctx, "WAIT", r.o.replicas, int64(r.o.replicaTimeout/time.Millisecond)).Int()
			if werr != nil || acked < r.o.replicas {
				rctx, cancel := c.cmdCtx(ctx)
				_ = c.run(rctx, conn, r.releaseArgs(owner)).Err()
				cancel()
				closeConn()
				if werr != nil {
					return nil, fmt.Errorf("dlock: WAIT for replicas after the grant of %q failed (the grant was released again): %w", r.key, werr)
				}
				return nil, &NotDurableError{Key: r.key, Wanted: r.o.replicas, Acked: acked}
			}
		}
		if !r.o.bind {
			closeConn()
			conn = nil
		}
		// The server's lease began at the grant, no earlier than sent; a grant that
		// came long after is re-anchored so the client's clock is not too pessimistic.
		anchor := sent
		if time.Since(sent) > lease/4 {
			now := time.Now()
			if n, err := c.run(ctx, conn, []any{"DLOCK.RENEW", r.key, owner, "PX", ms(lease)}).Int64(); err == nil && n == 1 {
				anchor = now
			}
		}
		return c.newHold(r, owner, token, lease, watchdog, anchor, conn), nil
	}
}

// send sends one acquire with WAIT w. When ctx ends during a server-side wait, the
// wait is abandoned at once: DLOCK.CANCEL gives the place up and a grant that raced
// with it is released in the background (abandoned = true).
func (c *Client) send(ctx context.Context, conn *redis.Conn, r *request, owner string, lease time.Duration, w int64) (int64, bool, error) {
	args := r.args(owner, lease, w)
	if w == 0 || ctx.Done() == nil {
		tok, err := c.run(ctx, conn, args).Int64()
		return tok, false, classify(r.cmd, r.key, err)
	}
	ch := make(chan *redis.Cmd, 1)
	bg := context.WithoutCancel(ctx)
	go func() { ch <- c.run(bg, conn, args) }()
	select {
	case cmd := <-ch:
		tok, err := cmd.Int64()
		return tok, false, classify(r.cmd, r.key, err)
	case <-ctx.Done():
		c.cancelPlaces(ctx, r.key, owner)
		go func() {
			cmd := <-ch
			if _, err := cmd.Int64(); err == nil {
				rctx, cancel := c.cmdCtx(bg)
				_ = c.run(rctx, conn, r.releaseArgs(owner)).Err()
				cancel()
			}
			if conn != nil {
				_ = conn.Close()
			}
		}()
		return 0, true, nil
	}
}
