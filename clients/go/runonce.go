package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock/dlock/clients/go/internal/core"
)

// RunOnceOptions are ShedLock's lockAtMostFor / lockAtLeastFor.
type RunOnceOptions struct {
	// AtMostFor is the lease: a process that dies mid-job holds the lock no longer. A
	// job that outlives it loses the hold (its context is cancelled), unless Renew.
	AtMostFor time.Duration
	// AtLeastFor: after a job that finished sooner, the hold is kept until this long
	// after the start (its lease set to the remainder, not released). Default 0.
	AtLeastFor time.Duration
	// Renew the lease every AtMostFor/3 while the job runs.
	Renew bool
	// Owner is the start of the run's owner id (default: a fresh owner id of the
	// Client); ":run" is appended.
	Owner string
}

// RunOutcome is what RunOnce did.
type RunOutcome int

const (
	// Ran: the job ran, and the hold lasted to its end.
	Ran RunOutcome = iota + 1
	// Skipped: someone else holds the job's lock; the job did not run.
	Skipped
	// RunLost: the job ran but the hold ended before the job did (lease, renewal
	// answered 0, force-release): another process may have run it meanwhile.
	RunLost
)

func (o RunOutcome) String() string {
	switch o {
	case Ran:
		return "ran"
	case Skipped:
		return "skipped"
	case RunLost:
		return "lost"
	}
	return fmt.Sprintf("RunOutcome(%d)", int(o))
}

// RunOnce runs job when no other process runs it now (one try, no waiting), on a mutex
// at name — ShedLock's @SchedulerLock (see docs/recipes.md). job's context is
// cancelled when the hold is lost (its cause is the hold's Err); the Hold gives the
// run's fencing token and Fenced writes. The error is job's (or the server's).
func RunOnce(ctx context.Context, c *Client, name string, o RunOnceOptions, job func(ctx context.Context, run *Hold) error) (RunOutcome, error) {
	if ctx == nil {
		return 0, nilContext()
	}
	if job == nil {
		return 0, &InvalidArgumentError{Argument: "job", Problem: "the job is nil; RunOnce needs a function to run"}
	}
	if o.AtMostFor <= 0 || o.AtMostFor > core.MaxLease || o.AtLeastFor < 0 || o.AtLeastFor > o.AtMostFor {
		return 0, &InvalidArgumentError{Argument: "RunOnceOptions", Problem: fmt.Sprintf("RunOnce %q needs 0 < AtMostFor <= 2^40 ms and 0 <= AtLeastFor <= AtMostFor, got %s and %s", name, o.AtMostFor, o.AtLeastFor)}
	}
	owner := o.Owner
	if owner == "" {
		owner = c.NewOwner()
	}
	owner += ":run"
	start := time.Now()
	r := newRequest(core.Mutex, name, lockOpts{lease: o.AtMostFor, leaseSet: true, renew: o.Renew, owner: owner, lockDelay: -1})
	h, err := c.acquire(ctx, r, false)
	if errors.Is(err, ErrNotAcquired) {
		return Skipped, nil
	}
	if err != nil {
		return 0, err
	}
	jctx, cancel := h.Context(ctx)
	jobErr := func() (err error) {
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				h.stopWatchdog()
				_, _ = h.Unlock(context.WithoutCancel(ctx))
				panic(p)
			}
		}()
		return job(jctx, h)
	}()
	h.stopWatchdog()
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CommandTimeout)
	defer ecancel()
	if h.Lost() {
		_, _ = h.Unlock(ectx)
		return RunLost, jobErr
	}
	if rest := o.AtLeastFor - time.Since(start); rest > 0 {
		// Keep the hold until start+AtLeastFor: a replica whose schedule runs a little
		// behind finds it taken and skips.
		n, err := c.run(ectx, nil, core.Renew(name, owner, rest)).Int64()
		if err == nil && n == 1 {
			h.discard()
			return Ran, jobErr
		}
		if err == nil {
			h.lose(core.NotHeld, "RENEW for at-least-for answered 0", ErrNotHeld)
			return RunLost, jobErr
		}
		return Ran, errors.Join(jobErr, classify("DLOCK.RENEW", name, err))
	}
	u, err := h.Unlock(ectx)
	if err != nil {
		return Ran, errors.Join(jobErr, err)
	}
	if u == Lost {
		return RunLost, jobErr
	}
	return Ran, jobErr
}
