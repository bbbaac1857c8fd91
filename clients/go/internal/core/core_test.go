package core

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

const ms = time.Millisecond

var t0 = time.Unix(1_000_000, 0)

func TestMargin(t *testing.T) {
	for _, tc := range []struct{ lease, want time.Duration }{
		{30 * time.Second, 350 * ms}, // 1 % + 50 ms
		{2 * time.Second, 70 * ms},   // the 2 s lease
		{1 * time.Second, 60 * ms},   //
		{100 * ms, 50 * ms},          // never more than half the lease
		{60 * ms, 30 * ms},           //
		{time.Hour, 36*time.Second + 50*ms},
	} {
		if got := Margin(tc.lease); got != tc.want {
			t.Errorf("Margin(%s) = %s, want %s", tc.lease, got, tc.want)
		}
		if got, want := ValidUntil(t0, tc.lease), t0.Add(tc.lease-tc.want); !got.Equal(want) {
			t.Errorf("ValidUntil(t0, %s) = %s after t0, want %s", tc.lease, got.Sub(t0), want.Sub(t0))
		}
	}
}

func TestSlice(t *testing.T) {
	for _, tc := range []struct{ def, transport, want time.Duration }{
		{0, 0, 4 * time.Second},               // no transport limit: the default slice
		{0, -1, 4 * time.Second},              // go-redis' -1: no timeout
		{0, 3 * time.Second, 2400 * ms},       // go-redis' default ReadTimeout: 3 s − 600 ms
		{0, 5 * time.Second, 4 * time.Second}, // 5 s − 1 s
		{0, time.Second, 800 * ms},            // 1 s − 200 ms
		{0, 400 * ms, 300 * ms},               // 400 − max(100, 80)
		{0, 100 * ms, MinSlice},               // at least 10 ms
		{2 * time.Second, 10 * time.Second, 2 * time.Second},
		{2 * time.Second, 0, 2 * time.Second},
	} {
		if got := Slice(tc.def, tc.transport); got != tc.want {
			t.Errorf("Slice(%s, %s) = %s, want %s", tc.def, tc.transport, got, tc.want)
		}
	}
}

func TestAnchorAndMs(t *testing.T) {
	if NeedsAnchor(t0, t0.Add(500*ms), 2*time.Second) {
		t.Error("a grant within a quarter of the lease needs no anchor")
	}
	if !NeedsAnchor(t0, t0.Add(501*ms), 2*time.Second) {
		t.Error("a grant after a quarter of the lease needs an anchor")
	}
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {time.Microsecond, 1}, {ms, 1}, {ms + 1, 2}, {time.Second, 1000}} {
		if got := Ms(tc.d); got != tc.want {
			t.Errorf("Ms(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		inv  *Invalid
		arg  string
	}{
		{"empty key", CheckKey("key", ""), "key"},
		{"zero lease", CheckLease("lease", 0), "lease"},
		{"negative lease", CheckLease("lease", -5*time.Second), "lease"},
		{"sub-millisecond lease", CheckLease("lease", time.Microsecond), "lease"},
		{"lease over 2^40 ms", CheckLease("lease", MaxLease+ms), "lease"},
		{"interval = lease", CheckRenewInterval(2*time.Second, 2*time.Second), "RenewInterval"},
		{"interval > lease", CheckRenewInterval(5*time.Second, 2*time.Second), "RenewInterval"},
		{"zero interval", CheckRenewInterval(0, 2*time.Second), "RenewInterval"},
		{"zero permits", CheckPermits(0, 3), "permits"},
		{"permits over limit", CheckPermits(4, 3), "permits"},
		{"zero limit", CheckLimit(0), "limit"},
	} {
		if tc.inv == nil || tc.inv.Argument != tc.arg || tc.inv.Problem == "" {
			t.Errorf("%s: %#v, want an Invalid naming %q", tc.name, tc.inv, tc.arg)
		}
	}
	for name, inv := range map[string]*Invalid{
		"key": CheckKey("key", "k"), "1 ms lease": CheckLease("lease", ms), "max lease": CheckLease("lease", MaxLease),
		"interval": CheckRenewInterval(time.Second, 3*time.Second), "permits": CheckPermits(3, 3), "limit": CheckLimit(1),
	} {
		if inv != nil {
			t.Errorf("%s refused: %v", name, inv)
		}
	}
}

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		spec    Spec
		wait    int64
		acquire []any
		release []any
	}{
		{Spec{Kind: Mutex, Key: "k", LockDelay: -1}, 0,
			[]any{"DLOCK.ACQUIRE", "k", "o", "PX", int64(2000)}, []any{"DLOCK.RELEASE", "k", "o"}},
		{Spec{Kind: Fair, Key: "k", Bind: true, LockDelay: 300 * ms}, 150,
			[]any{"DLOCK.FAIRACQUIRE", "k", "o", "PX", int64(2000), "WAIT", int64(150), "BIND", "LOCKDELAY", int64(300)},
			[]any{"DLOCK.RELEASE", "k", "o"}},
		{Spec{Kind: Read, Key: "k", LockDelay: -1}, 0,
			[]any{"DLOCK.RWACQUIRE", "k", "o", "READ", "PX", int64(2000)}, []any{"DLOCK.RELEASE", "k", "o", "READ"}},
		{Spec{Kind: Write, Key: "k", LockDelay: -1}, 0,
			[]any{"DLOCK.RWACQUIRE", "k", "o", "WRITE", "PX", int64(2000)}, []any{"DLOCK.RELEASE", "k", "o", "WRITE"}},
		{Spec{Kind: Semaphore, Key: "k", Limit: 5, Permits: 2, LockDelay: -1}, 0,
			[]any{"DLOCK.SEMACQUIRE", "k", "o", "LIMIT", int64(5), "PERMITS", int64(2), "PX", int64(2000)},
			[]any{"DLOCK.RELEASE", "k", "o", "PERMITS", int64(2)}},
	} {
		if got := tc.spec.Acquire("o", 2*time.Second, tc.wait); !reflect.DeepEqual(got, tc.acquire) {
			t.Errorf("Acquire: %v, want %v", got, tc.acquire)
		}
		if got := tc.spec.Release("o"); !reflect.DeepEqual(got, tc.release) {
			t.Errorf("Release: %v, want %v", got, tc.release)
		}
	}
	for key, want := range map[string]string{"k": "dlock:{k}", "a{b}c": "dlock:a{b}c", "a{}c": "dlock:{a{}c}", "a}b{": "dlock:{a}b{}"} {
		if got := Channel(key); got != want {
			t.Errorf("Channel(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	for msg, want := range map[string]ErrorKind{
		"NOTHELD the owner holds nothing":              NotHeldReply,
		"QUEUEFULL 1 places":                           QueueFullReply,
		"WRONGKIND the key holds a rwlock":             WrongKindReply,
		"WRONGTYPE Operation against a key":            WrongKindReply,
		"NOREPLICAS Not enough good replicas":          NoReplicasReply,
		"FENCED token 3 is not live":                   FencedReply,
		`DEADLOCK cycle: "a" waits for "b" on "k"`:     DeadlockReply,
		"ERR unknown command 'DLOCK.ACQUIRE', with":    ModuleNotLoadedReply,
		"ERR unknown command 'FOO', with args":         OtherReply,
		"ERR PX must be an integer number of millisec": OtherReply,
	} {
		if got := Classify(msg); got != want {
			t.Errorf("Classify(%q) = %d, want %d", msg, got, want)
		}
	}
	got := ParseCycle(`DEADLOCK cycle: "a" waits for "b" on "k1"; "b\x41" waits for "a" on "k\"2"`)
	want := []CycleStep{{"a", "b", "k1"}, {"bA", "a", `k"2`}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseCycle: %v, want %v", got, want)
	}
	if got := ParseCycle("DEADLOCK two readers wait to upgrade"); got != nil {
		t.Errorf("ParseCycle of no cycle: %v", got)
	}
}

func TestWait(t *testing.T) {
	slice := 2400 * ms
	connErr := errors.New("dial tcp: connection refused")
	// A wait with a 3 s deadline: slices bounded by the time left.
	w := NewWait(t0, t0.Add(3*time.Second), slice, false)
	if s := w.Next(t0); s.Action != Send || s.WaitMs != 2400 || !s.Until.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("first step: %+v", s)
	}
	if s := w.NotGranted(t0.Add(2400 * ms)); s.Action != Send || s.WaitMs != 600 {
		t.Fatalf("second slice: %+v", s)
	}
	if s := w.NotGranted(t0.Add(3*time.Second - 500*time.Microsecond)); s.Action != TimedOut {
		t.Fatalf("inside the last millisecond: %+v", s)
	}
	// Connection failures: pause and retry while time is left, then time out with the
	// last error.
	w = NewWait(t0, t0.Add(3*time.Second), slice, false)
	if s := w.ConnFailed(connErr, t0.Add(ms)); s.Action != Pause || s.For != ConnRetryPause {
		t.Fatalf("after a connection error: %+v", s)
	}
	if s := w.ConnFailed(connErr, t0.Add(3*time.Second-20*ms)); s.Action != Pause || s.For != 20*ms {
		t.Fatalf("pause bounded by the deadline: %+v", s)
	}
	if s := w.Next(t0.Add(3 * time.Second)); s.Action != TimedOut || w.LastErr() != connErr {
		t.Fatalf("at the deadline: %+v %v", s, w.LastErr())
	}
	// A wait without a deadline: full slices; a connection failure is reported.
	w = NewWait(t0, time.Time{}, slice, false)
	if s := w.Next(t0); s.Action != Send || s.WaitMs != 2400 || !s.Until.IsZero() {
		t.Fatalf("no deadline: %+v", s)
	}
	if s := w.ConnFailed(connErr, t0); s.Action != Failed {
		t.Fatalf("no deadline, connection error: %+v", s)
	}
	// A try: one command, no WAIT; not granted or failed at once.
	w = NewWait(t0, t0.Add(time.Second), slice, true)
	if s := w.Next(t0); s.Action != Send || s.WaitMs != 0 || !s.Until.Equal(t0.Add(TryTimeout)) {
		t.Fatalf("try: %+v", s)
	}
	if s := NewWait(t0, t0.Add(100*ms), slice, true).Next(t0); !s.Until.Equal(t0.Add(100 * ms)) {
		t.Fatalf("try bounded by its deadline: %+v", s)
	}
	if s := NewWait(t0, time.Time{}, slice, true).Next(t0); !s.Until.Equal(t0.Add(TryTimeout)) {
		t.Fatalf("try without a deadline: %+v", s)
	}
	if s := w.NotGranted(t0); s.Action != NotGranted {
		t.Fatalf("try not granted: %+v", s)
	}
	if s := w.ConnFailed(connErr, t0); s.Action != Failed {
		t.Fatalf("try failed: %+v", s)
	}
	if s := NewWait(t0, t0, slice, true).Next(t0); s.Action != TimedOut {
		t.Fatalf("try with an expired deadline: %+v", s)
	}
}

func TestClockWatchdog(t *testing.T) {
	lease := 2 * time.Second
	c := NewClock(t0, lease, RenewInterval(lease))
	if at, ok := c.NextRenew(); !ok || !at.Equal(t0.Add(666666666)) {
		t.Fatalf("first renewal at %v %v", at.Sub(t0), ok)
	}
	if _, ok := c.StartRenewal(t0.Add(100 * ms)); ok {
		t.Fatal("a renewal before it is due")
	}
	sent := t0.Add(700 * ms)
	until, ok := c.StartRenewal(sent)
	if !ok || !until.Equal(t0.Add(1930*ms)) {
		t.Fatalf("renewal's timeout %v, want the lease clock's end (1.93 s)", until.Sub(t0))
	}
	if _, ok := c.StartRenewal(sent); ok {
		t.Fatal("two renewals in flight")
	}
	if _, lost := c.Renewed(Renewed, sent, sent.Add(5*ms)); lost || !c.ValidUntil().Equal(sent.Add(1930*ms)) {
		t.Fatalf("after a renewal: valid until %v", c.ValidUntil().Sub(t0))
	}
	// A stalled renewal: the clock runs out at valid_until whatever the renewal does.
	sent2 := t0.Add(1400 * ms)
	if _, ok := c.StartRenewal(sent2); !ok {
		t.Fatal("second renewal")
	}
	if !c.Held(sent.Add(1929 * ms)) {
		t.Fatal("not held before valid_until")
	}
	if r, lost := c.Expire(sent.Add(1930 * ms)); !lost || r != Unreachable {
		t.Fatalf("Expire at valid_until: %q %v, want unreachable", r, lost)
	}
	// Its late answer does not revive the hold.
	if _, lost := c.Renewed(Renewed, sent2, sent.Add(2500*ms)); lost || c.Held(sent.Add(2500*ms)) {
		t.Fatal("a late renewal revived the hold")
	}
	if ended, r := c.Ended(); !ended || r != Unreachable {
		t.Fatalf("Ended: %v %q", ended, r)
	}
	// A renewal answered 0 ends the hold: not_held, or the reason of a pending notice.
	c = NewClock(t0, lease, RenewInterval(lease))
	c.StartRenewal(t0.Add(700 * ms))
	if r, lost := c.Renewed(RenewNotHeld, t0.Add(700*ms), t0.Add(710*ms)); !lost || r != NotHeld {
		t.Fatalf("RENEW 0: %q %v", r, lost)
	}
	// A failed renewal is retried an interval later.
	c = NewClock(t0, lease, RenewInterval(lease))
	c.StartRenewal(t0.Add(700 * ms))
	c.Renewed(RenewFailed, t0.Add(700*ms), t0.Add(900*ms))
	if at, ok := c.NextRenew(); !ok || !at.Equal(t0.Add(900*ms+666666666)) {
		t.Fatalf("retry at %v", at.Sub(t0))
	}
	// Unlock: never renewed again.
	c.Unlock()
	if _, ok := c.NextRenew(); ok {
		t.Fatal("renewal after Unlock")
	}
}

func TestClockExplicitLease(t *testing.T) {
	c := NewClock(t0, time.Second, 0)
	if _, ok := c.NextRenew(); ok {
		t.Fatal("an explicit lease has no watchdog")
	}
	if _, lost := c.Expire(t0.Add(939 * ms)); lost {
		t.Fatal("expired before valid_until")
	}
	c.Acked(2*time.Second, t0.Add(500*ms), t0.Add(510*ms))
	if !c.ValidUntil().Equal(t0.Add(500*ms + 1930*ms)) {
		t.Fatalf("after Renew: %v", c.ValidUntil().Sub(t0))
	}
	if r, lost := c.Expire(t0.Add(2430 * ms)); !lost || r != Expired {
		t.Fatalf("Expire: %q %v, want expired", r, lost)
	}
	// A hold a Session keeps alive: its clock running out means unreachable.
	c = NewClock(t0, time.Second, 0)
	c.KeptAlive()
	if r, lost := c.Expire(t0.Add(940 * ms)); !lost || r != Unreachable {
		t.Fatalf("Expire of a kept hold: %q %v, want unreachable", r, lost)
	}
}

func TestClockNotices(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want LostReason
	}{{"released", Forced}, {"expired", Expired}, {"deleted", Deleted}, {"disconnected", Disconnected}, {"elected", NotHeld}} {
		c := NewClock(t0, time.Second, 0)
		if !c.Notice(tc.msg) {
			t.Fatalf("%s: no CHECK asked", tc.msg)
		}
		if r, lost, again := c.Checked(false, false); !lost || again || r != tc.want {
			t.Errorf("%s, CHECK 0: %q %v %v, want %q", tc.msg, r, lost, again, tc.want)
		}
		if c.Notice("released") {
			t.Errorf("%s: a CHECK after the hold ended", tc.msg)
		}
	}
	// A live CHECK keeps the hold; a notice during a CHECK is checked after it; a
	// failed CHECK leaves the hold to its lease clock.
	c := NewClock(t0, time.Second, 0)
	c.Notice("released")
	if c.Notice("deleted") {
		t.Fatal("two CHECKs in flight")
	}
	if _, lost, again := c.Checked(true, false); lost || !again {
		t.Fatalf("live with a pending notice: lost %v again %v", lost, again)
	}
	if r, lost, _ := c.Checked(false, false); !lost || r != Deleted {
		t.Fatalf("the pending notice's CHECK: %q %v", r, lost)
	}
	// A recipe's own message does not hide a pending end notice.
	c = NewClock(t0, time.Second, 0)
	c.Notice("proclaimed")
	c.Notice("disconnected")
	c.Notice("elected")
	if _, lost, again := c.Checked(true, false); lost || !again {
		t.Fatal("no second CHECK")
	}
	if r, lost, _ := c.Checked(false, false); !lost || r != Disconnected {
		t.Fatalf("after disconnected then elected: %q %v", r, lost)
	}
	// A confirmation's CHECK (no notice) that finds the hold gone takes the reason
	// of a notice that arrived meanwhile.
	c = NewClock(t0, time.Second, 0)
	c.Notice("")
	c.Notice("disconnected")
	if r, lost, _ := c.Checked(false, false); !lost || r != Disconnected {
		t.Fatalf("confirmation CHECK with a pending notice: %q %v", r, lost)
	}
	c = NewClock(t0, time.Second, 0)
	c.Notice("released")
	if _, lost, again := c.Checked(false, true); lost || again || !c.Held(t0) {
		t.Fatal("a failed CHECK ended the hold")
	}
	// Unlocked: notices are the hold's own release.
	c = NewClock(t0, time.Second, 0)
	c.Unlock()
	if c.Notice("released") {
		t.Fatal("a CHECK after Unlock")
	}
}

func TestUnlocking(t *testing.T) {
	type answer struct {
		n        int64
		replyErr bool
		kind     ErrorKind
		connErr  bool
	}
	for _, tc := range []struct {
		name    string
		wasLost bool
		answers []answer
		want    Result
	}{
		{"released", false, []answer{{n: 1}}, Released},
		{"still held", false, []answer{{n: 0}}, StillHeld},
		{"NOTHELD", false, []answer{{replyErr: true, kind: NotHeldReply}}, Lost},
		{"lost before", true, []answer{{n: 1}}, Lost},
		{"retried once on a fresh connection", false, []answer{{connErr: true}, {n: 1}}, Released},
		{"retry NOTHELD", false, []answer{{connErr: true}, {replyErr: true, kind: NotHeldReply}}, Lost},
		{"the retry failed too", false, []answer{{connErr: true}, {connErr: true}}, Unknown},
		{"another error reply", false, []answer{{replyErr: true, kind: OtherReply}}, Unknown},
	} {
		u := NewUnlocking(tc.wasLost)
		var res Result
		for i, a := range tc.answers {
			r, retry := u.Answer(a.n, a.replyErr, a.kind, a.connErr)
			if retry != (i < len(tc.answers)-1) {
				t.Fatalf("%s: answer %d: retry %v", tc.name, i, retry)
			}
			res = r
		}
		if res != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, res, tc.want)
		}
	}
}
