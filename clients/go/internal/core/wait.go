package core

import "time"

// Action is what the acquire loop asks its driver to do next.
type Action int

const (
	// Send the acquire with WAIT Step.WaitMs (0: one try) and abandon the call at
	// Step.Until (zero: not bounded by a deadline).
	Send Action = iota + 1
	// Pause for Step.For, then ask Next again.
	Pause
	// TimedOut: the caller's deadline has come: give up (DLOCK.CANCEL in the
	// background) and report a timeout carrying LastErr.
	TimedOut
	// NotGranted: a try was not granted (a fair lock gives its place up with
	// DLOCK.CANCEL).
	NotGranted
	// Failed: the connection failed and no deadline or retry covers it: report
	// LastErr as a connection error.
	Failed
)

// Step is one step of the acquire loop.
type Step struct {
	Action Action
	WaitMs int64
	Until  time.Time
	For    time.Duration
}

// Wait is the acquire loop of one acquire: a try (one command, no WAIT, bounded by
// TryTimeout and the deadline), or server-side
// WAIT slices until the grant or the caller's deadline. A slice never outlasts the time
// left; a command that fails on the connection is tried again after ConnRetryPause
// while time is left (a wait with no deadline reports the failure).
type Wait struct {
	start    time.Time
	deadline time.Time
	slice    time.Duration
	try      bool
	lastErr  error
}

// NewWait starts the loop at now; deadline zero: none; slice: the longest WAIT (Slice).
func NewWait(now, deadline time.Time, slice time.Duration, try bool) *Wait {
	return &Wait{start: now, deadline: deadline, slice: slice, try: try}
}

// Next is the next step at now.
func (w *Wait) Next(now time.Time) Step {
	if w.try {
		until := now.Add(TryTimeout)
		if !w.deadline.IsZero() {
			if !now.Before(w.deadline) {
				return Step{Action: TimedOut}
			}
			if w.deadline.Before(until) {
				until = w.deadline
			}
		}
		return Step{Action: Send, Until: until}
	}
	if w.deadline.IsZero() {
		return Step{Action: Send, WaitMs: int64(w.slice / time.Millisecond)}
	}
	left := w.deadline.Sub(now)
	// Under a millisecond left, the deadline is here: a WAIT 0 try would race the
	// deadline on the wire, and a grant it lost would be held until its lease ran out.
	if left < time.Millisecond {
		return Step{Action: TimedOut}
	}
	s := w.slice
	if left < s {
		s = left
	}
	return Step{Action: Send, WaitMs: int64(s / time.Millisecond), Until: w.deadline}
}

// NotGranted: the acquire answered nil (not granted in its WAIT) at now.
func (w *Wait) NotGranted(now time.Time) Step {
	if w.try {
		return Step{Action: NotGranted}
	}
	return w.Next(now)
}

// ConnFailed: the acquire failed on the connection with err at now.
func (w *Wait) ConnFailed(err error, now time.Time) Step {
	w.lastErr = err
	if w.try || w.deadline.IsZero() {
		return Step{Action: Failed}
	}
	left := w.deadline.Sub(now)
	if left < time.Millisecond {
		return Step{Action: TimedOut}
	}
	p := ConnRetryPause
	if left < p {
		p = left
	}
	return Step{Action: Pause, For: p}
}

// LastErr is the last connection error of the loop (nil when none).
func (w *Wait) LastErr() error { return w.lastErr }

// Waited is how long the loop has run at now.
func (w *Wait) Waited(now time.Time) time.Duration { return now.Sub(w.start) }
