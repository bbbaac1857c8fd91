package dlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
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
type DeadlockStep struct {
	Owner, WaitsFor, Key string
}

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
// ErrTimeout and context.DeadlineExceeded.
type TimeoutError struct {
	Key    string
	Waited string
	cause  error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("dlock: timed out waiting for %q after %s (the context's deadline passed; nothing is held, no queue place kept)", e.Key, e.Waited)
}

// Is matches ErrTimeout.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Unwrap gives the context's error (context.DeadlineExceeded).
func (e *TimeoutError) Unwrap() error { return e.cause }

// LostError says why a hold ended without its Unlock. errors.Is matches ErrLost, and
// ErrNotHeld when the server said so.
type LostError struct {
	Key    string
	Reason string
	cause  error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("dlock: hold of %q lost: %s", e.Key, e.Reason)
}

// Is matches ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap gives the cause (ErrNotHeld, or the last error talking to the server).
func (e *LostError) Unwrap() error { return e.cause }

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
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "NOTHELD":
		e.kind = ErrNotHeld
	case "QUEUEFULL":
		e.kind = ErrQueueFull
	case "WRONGKIND", "WRONGTYPE":
		e.kind = ErrWrongKind
	case "NOREPLICAS":
		e.kind = ErrNoReplicas
	case "FENCED":
		e.kind = ErrFenced
	case "DEADLOCK":
		return &DeadlockError{Key: key, Message: msg, Cycle: parseCycle(msg), err: err}
	case "ERR":
		if strings.Contains(strings.ToLower(msg), "unknown command") && strings.Contains(strings.ToUpper(msg), "'DLOCK.") {
			e.kind = ErrModuleNotLoaded
		}
	}
	return &e
}

// parseCycle reads `DEADLOCK cycle: "o" waits for "p" on "k"; ...` into steps; it
// stops at the first text that is not a step.
func parseCycle(msg string) []DeadlockStep {
	_, rest, ok := strings.Cut(msg, "cycle:")
	if !ok {
		return nil
	}
	var out []DeadlockStep
	s := rest
	for {
		s = strings.TrimLeft(s, " ")
		owner, r, ok := unquote(s)
		if !ok {
			break
		}
		r, ok = strings.CutPrefix(r, " waits for ")
		if !ok {
			break
		}
		waitsFor, r, ok := unquote(r)
		if !ok {
			break
		}
		r, ok = strings.CutPrefix(r, " on ")
		if !ok {
			break
		}
		key, r, ok := unquote(r)
		if !ok {
			break
		}
		out = append(out, DeadlockStep{Owner: owner, WaitsFor: waitsFor, Key: key})
		s, ok = strings.CutPrefix(r, ";")
		if !ok {
			break
		}
	}
	return out
}

// unquote takes a double-quoted string with \\ \" \n \r \t \xHH escapes off the front.
func unquote(s string) (string, string, bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", s, false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), s[i+1:], true
		case '\\':
			if i+1 >= len(s) {
				return "", s, false
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'x':
				if i+2 >= len(s) {
					return "", s, false
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return "", s, false
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", s, false
}
