package core

import "time"

// LostReason is why a hold is no longer held (docs/clients.md, rule 5).
type LostReason string

const (
	// Forced: a `released` notice for a hold this handle did not release
	// (DLOCK.FORCERELEASE, or the same owner released it elsewhere).
	Forced LostReason = "forced"
	// Expired: its lease ended (an explicit lease ran out, or the server's `expired`
	// notice).
	Expired LostReason = "expired"
	// Deleted: its key was deleted (DEL, FLUSHDB, eviction).
	Deleted LostReason = "deleted"
	// Disconnected: its BIND connection closed.
	Disconnected LostReason = "disconnected"
	// Unreachable: no renewal was acknowledged before the lease clock ran out.
	Unreachable LostReason = "unreachable"
	// NotHeld: the server says the hold is gone and no notice said why.
	NotHeld LostReason = "not_held"
	// NoQuorum: a RedLock's renewals no longer reach a majority.
	NoQuorum LostReason = "no_quorum"
)

// NoticeReason is the reason of a loss that a CHECK confirmed after the notice msg.
func NoticeReason(msg string) LostReason {
	switch msg {
	case "released":
		return Forced
	case "expired":
		return Expired
	case "deleted":
		return Deleted
	case "disconnected":
		return Disconnected
	}
	return NotHeld
}

// Renewal is what a watchdog's RENEW found.
type Renewal int

const (
	// Renewed: RENEW answered 1.
	Renewed Renewal = iota + 1
	// RenewNotHeld: RENEW answered 0 (or NOTHELD): the server holds nothing.
	RenewNotHeld
	// RenewFailed: no answer (connection, timeout) or another error.
	RenewFailed
)

// Clock is one hold's lease clock (rule 1), watchdog schedule and notice checks (rule
// 2). It is not safe for concurrent use: its driver guards it with the hold's mutex,
// which no network call holds.
type Clock struct {
	lease      time.Duration
	interval   time.Duration // 0: no watchdog
	validUntil time.Time
	nextRenew  time.Time
	renewing   bool
	ended      bool
	reason     LostReason
	unlocked   bool
	kept       bool // renewed by a Session's keepalive
	checking   bool
	notice     string // the notice the CHECK in flight answers
	pending    string // a notice that arrived during that CHECK
}

// NewClock is the clock of a hold granted with lease, anchored at sent (when the
// request that started the server's lease was sent). interval is the watchdog's renew
// interval; 0: no watchdog (an explicit lease).
func NewClock(sent time.Time, lease, interval time.Duration) *Clock {
	c := &Clock{lease: lease, interval: interval, validUntil: ValidUntil(sent, lease)}
	if interval > 0 {
		c.nextRenew = sent.Add(interval)
	}
	return c
}

// KeptAlive marks a hold renewed by a Session's one keepalive for many holds: its lease
// clock running out means the keepalive did not get through (Unreachable).
func (c *Clock) KeptAlive() { c.kept = true }

// Lease is the hold's current lease.
func (c *Clock) Lease() time.Duration { return c.lease }

// ValidUntil is when the hold ends on the client's clock at the latest.
func (c *Clock) ValidUntil() time.Time { return c.validUntil }

// Watchdog reports whether a watchdog renews the hold.
func (c *Clock) Watchdog() bool { return c.interval > 0 }

// Ended reports whether the hold is over (lost or unlocked) and, when lost, why.
func (c *Clock) Ended() (bool, LostReason) { return c.ended, c.reason }

// Unlocked reports whether Unlock was called.
func (c *Clock) Unlocked() bool { return c.unlocked }

// Held reports whether the hold is live at now: not ended, not unlocked, and its
// lease clock not run out.
func (c *Clock) Held(now time.Time) bool {
	return !c.ended && !c.unlocked && now.Before(c.validUntil)
}

// End ends the hold for reason ("" for an unlock); false when it had ended already
// (the first end wins: a fired loss signal stays fired).
func (c *Clock) End(reason LostReason) bool {
	if c.ended {
		return false
	}
	c.ended, c.reason = true, reason
	return true
}

// Expire ends the hold when its lease clock has run out at now: Unreachable under a
// watchdog (no renewal was acknowledged in time), Expired for an explicit lease.
func (c *Clock) Expire(now time.Time) (LostReason, bool) {
	if c.ended || now.Before(c.validUntil) {
		return "", false
	}
	r := Expired
	if (c.interval > 0 || c.kept) && !c.unlocked {
		r = Unreachable
	}
	c.End(r)
	return r, true
}

// NextRenew is when the watchdog renews next; ok false when it does not (no
// watchdog, ended, unlocked, or a renewal is in flight).
func (c *Clock) NextRenew() (at time.Time, ok bool) {
	if c.interval <= 0 || c.ended || c.unlocked || c.renewing {
		return time.Time{}, false
	}
	return c.nextRenew, true
}

// StartRenewal starts a watchdog renewal at now: ok false when none is due; until is
// the renewal's own timeout (the lease clock's end: a renewal unanswered by then has
// failed).
func (c *Clock) StartRenewal(now time.Time) (until time.Time, ok bool) {
	at, ok := c.NextRenew()
	if !ok || now.Before(at) || !now.Before(c.validUntil) {
		return time.Time{}, false
	}
	c.renewing = true
	return c.validUntil, true
}

// Renewed files the outcome of the watchdog renewal sent at sent, answered at now; a
// reason when it ended the hold.
func (c *Clock) Renewed(outcome Renewal, sent, now time.Time) (LostReason, bool) {
	c.renewing = false
	if c.ended || c.unlocked {
		return "", false
	}
	if !now.Before(c.validUntil) {
		// The signal is due (its timer may not have run yet): a late answer does not
		// revive the hold.
		return c.Expire(now)
	}
	switch outcome {
	case Renewed:
		c.validUntil = ValidUntil(sent, c.lease)
		c.nextRenew = sent.Add(c.interval)
	case RenewNotHeld:
		r := c.noticed(c.notice)
		c.End(r)
		return r, true
	default:
		c.nextRenew = now.Add(c.interval)
	}
	return "", false
}

// Acked files an explicit renewal (Hold.Renew) with lease, sent at sent and
// acknowledged at now.
func (c *Clock) Acked(lease time.Duration, sent, now time.Time) {
	if c.ended || !now.Before(c.validUntil) {
		return
	}
	c.lease = lease
	c.validUntil = ValidUntil(sent, lease)
	if c.interval > 0 {
		c.nextRenew = sent.Add(c.interval)
	}
}

// StopWatchdog stops renewing; the lease clock keeps running.
func (c *Clock) StopWatchdog() { c.interval = 0 }

// Unlock marks the hold unlocked: the watchdog never renews it again, whatever the
// release answers. It returns the reason the hold had been lost before ("" if not).
func (c *Clock) Unlock() LostReason {
	c.unlocked = true
	return c.reason
}

// Notice files a notification msg on the hold's channel: check is true when the
// driver must now send DLOCK.CHECK (none is in flight); a notice that arrives during a
// CHECK is checked after it.
func (c *Clock) Notice(msg string) (check bool) {
	if c.ended || c.unlocked {
		return false
	}
	if c.checking {
		// A notice that names no end (a recipe's own message) does not hide one that
		// does.
		if c.pending == "" || NoticeReason(msg) != NotHeld {
			c.pending = msg
		}
		return false
	}
	c.checking, c.notice = true, msg
	return true
}

// noticed is the reason of a loss found after the notice msg: msg's, or when msg says
// nothing (a subscription's confirmation, no notice) the reason of a notice that came
// since.
func (c *Clock) noticed(msg string) LostReason {
	r := NoticeReason(msg)
	if r == NotHeld && c.pending != "" {
		r = NoticeReason(c.pending)
	}
	return r
}

// Checked files the answer to the CHECK of the last notice: live (1), or failed (no
// answer: the lease clock still covers the hold). lost: the hold ended, for reason;
// again: another notice arrived meanwhile, CHECK again.
func (c *Clock) Checked(live, failed bool) (reason LostReason, lost, again bool) {
	msg := c.notice
	if c.ended || c.unlocked {
		c.checking, c.notice, c.pending = false, "", ""
		return "", false, false
	}
	if !failed && !live {
		r := c.noticed(msg)
		c.End(r)
		c.checking, c.notice, c.pending = false, "", ""
		return r, true, false
	}
	if c.pending != "" {
		c.notice, c.pending = c.pending, ""
		return "", false, true
	}
	c.checking, c.notice = false, ""
	return "", false, false
}

// Result is what an unlock found (rule 3).
type Result int

const (
	// Released: the server ended the hold (RELEASE answered 1).
	Released Result = iota + 1
	// StillHeld: a reentrant count remains (RELEASE answered 0).
	StillHeld
	// Lost: the hold was gone before the unlock (NOTHELD, or its loss signal had
	// fired).
	Lost
	// Unknown: the release failed on the connection twice; the hold ends at its lease
	// at the latest and is not renewed.
	Unknown
)

// Unlocking is the unlock state machine: one RELEASE, retried once on a fresh
// connection when it fails on the connection.
type Unlocking struct {
	wasLost bool
	tries   int
}

// NewUnlocking starts an unlock of a hold whose loss signal had fired (wasLost) or not.
func NewUnlocking(wasLost bool) *Unlocking { return &Unlocking{wasLost: wasLost} }

// Answer files the RELEASE's answer: reply n; or an error reply of class kind
// (replyErr); or a connection failure (connErr). retry: send the RELEASE once more, on a
// fresh connection; else the result.
func (u *Unlocking) Answer(n int64, replyErr bool, kind ErrorKind, connErr bool) (res Result, retry bool) {
	u.tries++
	switch {
	case connErr:
		if u.tries == 1 {
			return 0, true
		}
		return Unknown, false
	case replyErr && kind == NotHeldReply:
		return Lost, false
	case replyErr:
		return Unknown, false
	case u.wasLost:
		return Lost, false
	case n == 1:
		return Released, false
	}
	return StillHeld, false
}
