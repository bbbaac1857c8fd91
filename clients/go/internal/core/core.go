// Package core is the sans-IO core of the Go client: the rules of the client contract
// (docs/clients.md) — the lease clock and its margin, the renew schedule, the wait
// slices, the acquire loop, reply decoding, error classification and the unlock
// state machine — in plain Go, with time passed in and no I/O.
//
// The dlock package is the driver: it sends the commands the core builds on go-redis,
// feeds the answers back with the current instant, and acts on what the core decides.
// The names follow the Rust (clients/rust/src/core), Python (_core.py, _ops.py) and
// Java (dlock-core .../core) cores where Go's idiom allows.
package core

import (
	"fmt"
	"time"
)

const (
	// DefaultLease is the watchdog's lease when none is given.
	DefaultLease = 30 * time.Second
	// DefaultSlice is the longest server-side WAIT of one slice when the transport
	// allows more (under GLIDE's warning threshold of 4.25 s for a 5 s request
	// timeout; every client uses it).
	DefaultSlice = 4 * time.Second
	// MinSlice is the shortest slice, whatever the transport's timeout.
	MinSlice = 10 * time.Millisecond
	// MaxLease is the longest lease the server takes (2^40 ms).
	MaxLease = (1 << 40) * time.Millisecond
	// CommandTimeout bounds a command the client sends on its own behalf (a CANCEL, the
	// release of a grant that raced with a give-up, a notice's CHECK) by default.
	CommandTimeout = 5 * time.Second
	// TryTimeout bounds a try (an acquire with no wait) when its context allows more:
	// a try is one quick question, so one that gets no answer in time (a server down,
	// refusing connections, partitioned; go-redis alone spends 1.7 s on refused
	// connections by default) reports a connection failure at once.
	TryTimeout = 500 * time.Millisecond
	// ConnRetryPause is the pause between tries of a wait whose command failed on the
	// connection (server down, refusing, restarting): short, as the deadline bounds it.
	ConnRetryPause = 50 * time.Millisecond
)

// Margin is what the lease clock takes off a lease: 1 % for clock rate drift between
// client and server plus 50 ms for a late timer, never more than half the lease.
func Margin(lease time.Duration) time.Duration {
	m := lease/100 + 50*time.Millisecond
	if h := lease / 2; m > h {
		m = h
	}
	return m
}

// ValidUntil is the end of a hold on the client's clock: sent + lease − margin, where
// sent is when the last acknowledged ACQUIRE or RENEW was sent (the server's lease
// began no earlier).
func ValidUntil(sent time.Time, lease time.Duration) time.Time {
	return sent.Add(lease - Margin(lease))
}

// RenewInterval is the watchdog's interval for a lease when none is given: a third.
func RenewInterval(lease time.Duration) time.Duration { return lease / 3 }

// AnchorSlack is how long a grant's reply may take before the hold is re-anchored with
// a RENEW: a quarter of the lease (the clock would otherwise keep little of it).
func AnchorSlack(lease time.Duration) time.Duration { return lease / 4 }

// NeedsAnchor reports whether a grant whose request was sent at sent and whose reply
// arrived at arrived must be re-anchored with a RENEW.
func NeedsAnchor(sent, arrived time.Time, lease time.Duration) bool {
	return arrived.Sub(sent) > AnchorSlack(lease)
}

// Slice is the longest server-side WAIT of one slice under a transport whose reply
// timeout is transport (0 or less: none):
//
//	min(def, transport − max(100 ms, transport/5)), at least MinSlice.
//
// def is the client's own longest slice (DefaultSlice when 0 or less).
func Slice(def, transport time.Duration) time.Duration {
	if def <= 0 {
		def = DefaultSlice
	}
	s := def
	if transport > 0 {
		reserve := transport / 5
		if reserve < 100*time.Millisecond {
			reserve = 100 * time.Millisecond
		}
		if t := transport - reserve; t < s {
			s = t
		}
	}
	if s < MinSlice {
		s = MinSlice
	}
	return s
}

// Ms is d in whole milliseconds, rounded up, at least 1 (a lease or PX argument).
func Ms(d time.Duration) int64 {
	m := int64((d + time.Millisecond - 1) / time.Millisecond)
	if m < 1 {
		return 1
	}
	return m
}

// Invalid is bad input, found before anything is sent: which argument, and what was
// wrong with it and expected instead.
type Invalid struct {
	Argument string
	Problem  string
}

func (e *Invalid) Error() string {
	return fmt.Sprintf("dlock: invalid %s: %s", e.Argument, e.Problem)
}

// CheckKey refuses an empty key.
func CheckKey(argument, key string) *Invalid {
	if key == "" {
		return &Invalid{argument, "the key is empty; a lock needs a non-empty key"}
	}
	return nil
}

// CheckLease refuses a lease outside 1 ms .. 2^40 ms.
func CheckLease(argument string, d time.Duration) *Invalid {
	if d < time.Millisecond || d > MaxLease {
		return &Invalid{argument, fmt.Sprintf("got %s, want 1ms to %s (2^40 ms)", d, MaxLease)}
	}
	return nil
}

// CheckRenewInterval refuses a renew interval that is not below its lease (or not
// positive).
func CheckRenewInterval(interval, lease time.Duration) *Invalid {
	if interval <= 0 || interval >= lease {
		return &Invalid{"RenewInterval", fmt.Sprintf("got %s for a lease of %s; it must be above 0 and below the lease (default: a third of it)", interval, lease)}
	}
	return nil
}

// CheckPermits refuses a permit count outside 1..limit.
func CheckPermits(n, limit int64) *Invalid {
	if n < 1 || n > limit {
		return &Invalid{"permits", fmt.Sprintf("got %d, want 1 to %d (the semaphore's limit)", n, limit)}
	}
	return nil
}

// CheckLimit refuses a semaphore limit below 1.
func CheckLimit(limit int64) *Invalid {
	if limit < 1 {
		return &Invalid{"limit", fmt.Sprintf("got %d, want at least 1 permit", limit)}
	}
	return nil
}

// Quorum is the RedLock majority of n servers.
func Quorum(n int) int { return n/2 + 1 }
