package core

import (
	"strings"
	"time"
)

// Kind is the kind of a lock handle.
type Kind int

const (
	Mutex Kind = iota
	Read
	Write
	Fair
	Semaphore
)

// Command is the acquire command of the kind.
func (k Kind) Command() string {
	switch k {
	case Read, Write:
		return "DLOCK.RWACQUIRE"
	case Fair:
		return "DLOCK.FAIRACQUIRE"
	case Semaphore:
		return "DLOCK.SEMACQUIRE"
	}
	return "DLOCK.ACQUIRE"
}

// Spec is one acquire's target: the kind, the key and what the kind needs.
type Spec struct {
	Kind    Kind
	Key     string
	Limit   int64 // semaphore
	Permits int64 // semaphore
	Bind    bool
	// LockDelay is LOCKDELAY; below 0: none.
	LockDelay time.Duration
}

// Acquire is the acquire command for owner with lease, waiting waitMs on the server (0:
// one try).
func (s *Spec) Acquire(owner string, lease time.Duration, waitMs int64) []any {
	a := make([]any, 0, 14)
	a = append(a, s.Kind.Command(), s.Key, owner)
	switch s.Kind {
	case Read:
		a = append(a, "READ")
	case Write:
		a = append(a, "WRITE")
	case Semaphore:
		a = append(a, "LIMIT", s.Limit, "PERMITS", s.Permits)
	}
	a = append(a, "PX", Ms(lease))
	if waitMs > 0 {
		a = append(a, "WAIT", waitMs)
	}
	if s.Bind {
		a = append(a, "BIND")
	}
	if s.LockDelay >= 0 {
		a = append(a, "LOCKDELAY", int64(s.LockDelay/time.Millisecond))
	}
	return a
}

// Release is the DLOCK.RELEASE of owner's hold.
func (s *Spec) Release(owner string) []any {
	switch s.Kind {
	case Read:
		return []any{"DLOCK.RELEASE", s.Key, owner, "READ"}
	case Write:
		return []any{"DLOCK.RELEASE", s.Key, owner, "WRITE"}
	case Semaphore:
		return []any{"DLOCK.RELEASE", s.Key, owner, "PERMITS", s.Permits}
	}
	return []any{"DLOCK.RELEASE", s.Key, owner}
}

// Renew is DLOCK.RENEW key owner PX lease.
func Renew(key, owner string, lease time.Duration) []any {
	return []any{"DLOCK.RENEW", key, owner, "PX", Ms(lease)}
}

// Check is DLOCK.CHECK key token.
func Check(key string, token int64) []any { return []any{"DLOCK.CHECK", key, token} }

// Cancel is DLOCK.CANCEL key owner: gives up owner's queue places.
func Cancel(key, owner string) []any { return []any{"DLOCK.CANCEL", key, owner} }

// Channel is the lock's notification channel: "dlock:"+key when the key has a hash tag
// ({…} with non-empty content), else "dlock:{"+key+"}" (so it hashes to the key's slot).
func Channel(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return "dlock:" + key
		}
	}
	return "dlock:{" + key + "}"
}
