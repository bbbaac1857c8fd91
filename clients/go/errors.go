package dlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/clients/go/internal/core"
)

// Sentinel errors. Test for them with errors.Is; the error values returned carry more
// detail (the key, the server's message) and also unwrap to the go-redis error.
var (
	// ErrNotAcquired: a try (TryLock, TryAcquire, a RedLock that got no majority) was not
	// granted. Nothing is held and no queue place is left behind.
	ErrNotAcquired = errors.New("dlock: not acquired")
	// ErrTimeout: a wait ended at its context's deadline before the grant. The error
	// also matches context.DeadlineExceeded. Nothing is held and no queue place is left.
	ErrTimeout = errors.New("dlock: timed out waiting for the lock")
	// ErrNotHeld: the owner holds nothing on the key (never acquired, lease ended,
	// force-released): the server's NOTHELD reply.
	ErrNotHeld = errors.New("dlock: not held")
	// ErrLost: a hold ended without its Unlock (Hold.Err after Hold.Done is closed).
	ErrLost = errors.New("dlock: hold lost")
	// ErrDeadlock: the server refused a wait that would close a wait-for cycle
	// (errors.As with *DeadlockError gives the cycle).
	ErrDeadlock = errors.New("dlock: deadlock")
	// ErrNotDurable: a grant that too few replicas acknowledged (errors.As with
	// *NotDurableError gives the counts); it was released again.
	ErrNotDurable = errors.New("dlock: grant not durable")
	// ErrNoReplicas: the server refuses writes (acquires included) because fewer than
	// min-replicas-to-write replicas are connected (NOREPLICAS).
	ErrNoReplicas = errors.New("dlock: not enough replicas connected")
	// ErrQueueFull: the lock's queue holds dlock.max-queue places (QUEUEFULL).
	ErrQueueFull = errors.New("dlock: queue full")
	// ErrWrongKind: the key holds a lock of another kind (WRONGKIND) or is not a lock
	// at all (WRONGTYPE).
	ErrWrongKind = errors.New("dlock: wrong kind of lock at key")
	// ErrFenced: DLOCK.FENCED refused the command: the token is no longer live.
	ErrFenced = errors.New("dlock: fenced: token no longer live")
	// ErrModuleNotLoaded: the server does not know the DLOCK.* commands.
	ErrModuleNotLoaded = errors.New("dlock: the dlock module is not loaded on the server")
	// ErrConnection: the connection failed and no deadline or retry covers it (a try
	// against a server that is down; errors.As with *ConnectionError gives the
	// command). A wait with a deadline keeps trying until the deadline and then
	// reports ErrTimeout, carrying the last connection error.
	ErrConnection = errors.New("dlock: connection failed")
	// ErrInvalidArgument: bad input, refused before anything was sent (errors.As with
	// *InvalidArgumentError names the argument).
	ErrInvalidArgument = errors.New("dlock: invalid argument")
	// ErrUnknown: an Unlock whose release failed on the connection twice (Unlock
	// answers Unknown): the hold is not renewed and ends at its lease at the latest.
	ErrUnknown = errors.New("dlock: unlock outcome unknown")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("dlock: client closed")
)

// LostReason is why a hold was lost (Hold.Reason, LostError.Reason): the contract's
// reasons (docs/clients.md, rule 5).
type LostReason string

const (
	// LostForced: a `released` notice for a hold this handle did not release
	// (DLOCK.FORCERELEASE, or the same owner released it elsewhere).
	LostForced = LostReason(core.Forced)
	// LostExpired: its lease ended (an explicit lease ran out, or the server's
	// `expired` notice).
	LostExpired = LostReason(core.Expired)
	// LostDeleted: its key was deleted (DEL, FLUSHDB, eviction).
	LostDeleted = LostReason(core.Deleted)
	// LostDisconnected: its BIND connection closed.
	LostDisconnected = LostReason(core.Disconnected)
	// LostUnreachable: no renewal was acknowledged before the lease clock ran out
	// (a partition, a server that is down), or the Client was closed.
	LostUnreachable = LostReason(core.Unreachable)
	// LostNotHeld: the server says the hold is gone and no notice said why.
	LostNotHeld = LostReason(core.NotHeld)
	// LostNoQuorum: a RedLock's renewals no longer reach a majority.
	LostNoQuorum = LostReason(core.NoQuorum)
)

// Error is an error reply of the server for a dlock command, classified: errors.Is
// matches one of the sentinel errors above (when the reply is one of them), errors.As
// with redis.Error reaches the go-redis error.
type Error struct {
	// Command is the command that failed, e.g. "DLOCK.ACQUIRE".
	Command string
	// Key is the lock key.
	Key string
	// Message is the server's whole error text.
	Message string
	kind    error
	err     error
}

func (e *Error) Error() string {
	if e.kind == ErrModuleNotLoaded {
		return fmt.Sprintf("dlock: %s %q: the server does not know the command: the dlock module is not loaded "+
			"(check MODULE LIST; start the server with --loadmodule /path/to/libdlock.so, or MODULE LOAD it): %s",
			e.Command, e.Key, e.Message)
	}
	return fmt.Sprintf("dlock: %s %q: %s", e.Command, e.Key, e.Message)
}

// Is matches the sentinel error of the reply's class.
func (e *Error) Is(target error) bool { return e.kind != nil && target == e.kind }

// Unwrap gives the go-redis error.
func (e *Error) Unwrap() error { return e.err }

// Code is the first word of the reply ("NOTHELD", "WRONGKIND", "ERR", ...).
func (e *Error) Code() string {
	code, _, _ := strings.Cut(e.Message, " ")
	return code
}

// DeadlockStep is one step of a deadlock cycle: Owner waits on Key for WaitsFor.
type DeadlockStep = core.CycleStep

// DeadlockError is a DEADLOCK reply: the server refused a wait that would have closed
// a wait-for cycle across locks (nothing was queued; the owner's other holds stay:
// release them and retry). Cycle is empty for the other DEADLOCK reply: a second
// reader asked to upgrade to WRITE while another reader waits to upgrade.
type DeadlockError struct {
	// Key is the key of the refused request; Message the server's whole text.
	Key, Message string
	// Cycle starts with the owner whose request was refused; each step's owner waits
	// for the next step's owner (the last for the first's).
	Cycle []DeadlockStep
	err   error
}

func (e *DeadlockError) Error() string { return fmt.Sprintf("dlock: %q: %s", e.Key, e.Message) }

// Is matches ErrDeadlock.
func (e *DeadlockError) Is(target error) bool { return target == ErrDeadlock }

// Unwrap gives the go-redis error.
func (e *DeadlockError) Unwrap() error { return e.err }

// NotDurableError: a grant fewer than Wanted replicas acknowledged in time (WAIT
// answered Acked). The grant was released again: nothing is held.
type NotDurableError struct {
	Key           string
	Wanted, Acked int
}

func (e *NotDurableError) Error() string {
	return fmt.Sprintf("dlock: grant of %q not durable: %d of %d replicas acknowledged it in time (it was released again)",
		e.Key, e.Acked, e.Wanted)
}

// Is matches ErrNotDurable.
func (e *NotDurableError) Is(target error) bool { return target == ErrNotDurable }

// TimeoutError: a wait for Key ran until its context's deadline. errors.Is matches
// ErrTimeout and context.DeadlineExceeded; LastErr is the last connection error of the
// wait (nil when none: the lock was held by others all along).
type TimeoutError struct {
	Key     string
	Waited  string
	LastErr error
	cause   error
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("dlock: timed out waiting for %q after %s (the context's deadline passed; nothing is held, no queue place kept)", e.Key, e.Waited)
	if e.LastErr != nil {
		msg += "; the last connection error: " + e.LastErr.Error()
	}
	return msg
}

// Is matches ErrTimeout.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Unwrap gives the context's error (context.DeadlineExceeded) and the last connection
// error.
func (e *TimeoutError) Unwrap() []error {
	if e.LastErr != nil {
		return []error{e.cause, e.LastErr}
	}
	return []error{e.cause}
}

// LostError says why a hold ended without its Unlock. errors.Is matches ErrLost, and
// ErrNotHeld when the server said so.
type LostError struct {
	Key string
	// Reason is the contract's reason (LostForced, LostUnreachable, ...).
	Reason LostReason
	// Detail says what happened, in words.
	Detail string
	cause  error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("dlock: hold of %q lost (%s): %s", e.Key, e.Reason, e.Detail)
}

// Is matches ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap gives the cause (ErrNotHeld, or the last error talking to the server).
func (e *LostError) Unwrap() error { return e.cause }

// InvalidArgumentError is bad input, refused before anything was sent. errors.Is
// matches ErrInvalidArgument.
type InvalidArgumentError struct {
	// Argument names the argument (e.g. "key", "lease (WithLease)", "ctx").
	Argument string
	// Problem says what was wrong and what was expected.
	Problem string
}

func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("dlock: invalid %s: %s", e.Argument, e.Problem)
}

// Is matches ErrInvalidArgument.
func (e *InvalidArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

func invalid(bad *core.Invalid) error {
	return &InvalidArgumentError{Argument: bad.Argument, Problem: bad.Problem}
}

func nilContext() error {
	return &InvalidArgumentError{Argument: "ctx", Problem: "the context is nil; pass context.Background() or a context with a deadline"}
}

// ConnectionError: Command for Key failed on the connection (no reply). errors.Is
// matches ErrConnection; it unwraps to go-redis' (or the network's) error.
type ConnectionError struct {
	Command, Key string
	err          error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("dlock: %s %q: no reply from the server: %v", e.Command, e.Key, e.err)
}

// Is matches ErrConnection.
func (e *ConnectionError) Is(target error) bool { return target == ErrConnection }

// Unwrap gives the underlying error.
func (e *ConnectionError) Unwrap() error { return e.err }

// isReply reports whether err is an error reply of the server (not redis.Nil, not I/O).
func isReply(err error) bool {
	var re redis.Error
	return err != nil && err != redis.Nil && errors.As(err, &re)
}

// classify turns a go-redis error reply into an *Error (or *DeadlockError); other
// errors (I/O, redis.Nil) are returned as they are.
func classify(command, key string, err error) error {
	if err == nil || err == redis.Nil {
		return err
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return err
	}
	msg := re.Error()
	e := Error{Command: command, Key: key, Message: msg, err: err}
	switch core.Classify(msg) {
	case core.NotHeldReply:
		e.kind = ErrNotHeld
	case core.QueueFullReply:
		e.kind = ErrQueueFull
	case core.WrongKindReply:
		e.kind = ErrWrongKind
	case core.NoReplicasReply:
		e.kind = ErrNoReplicas
	case core.FencedReply:
		e.kind = ErrFenced
	case core.DeadlockReply:
		return &DeadlockError{Key: key, Message: msg, Cycle: core.ParseCycle(msg), err: err}
	case core.ModuleNotLoadedReply:
		e.kind = ErrModuleNotLoaded
	}
	return &e
}
