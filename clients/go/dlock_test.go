package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	dlock "github.com/dlock/dlock/clients/go"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// info is DLOCK.INFO key as a map (RESP3 map or RESP2 flat array), nil when no lock.
func info(t *testing.T, rdb *redis.Client, key string) map[string]any {
	t.Helper()
	v, err := rdb.Do(context.Background(), "DLOCK.INFO", key).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatalf("DLOCK.INFO %s: %v", key, err)
	}
	out := map[string]any{}
	switch m := v.(type) {
	case map[any]any:
		for k, x := range m {
			out[fmt.Sprint(k)] = x
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[fmt.Sprint(m[i])] = m[i+1]
		}
	default:
		t.Fatalf("DLOCK.INFO %s: unexpected reply %T", key, v)
	}
	return out
}

func waiters(t *testing.T, rdb *redis.Client, key string) int {
	m := info(t, rdb, key)
	if m == nil {
		return 0
	}
	w, _ := m["waiters"].([]any)
	return len(w)
}

// unlockWant unlocks h and fails the test unless Unlock found want, with no error.
func unlockWant(t *testing.T, ctx context.Context, h interface {
	Unlock(context.Context) (dlock.Unlock, error)
}, want dlock.Unlock, what string) {
	t.Helper()
	if u, err := h.Unlock(ctx); u != want || err != nil {
		t.Fatalf("%s: %v %v, want %v", what, u, err, want)
	}
}

// eventually polls cond every 5 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMutexLockTryUnlock(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	m := c.Mutex("orders")
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Token() <= 0 || h.Key() != "orders" {
		t.Fatalf("token %d key %q", h.Token(), h.Key())
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while held: %v, want ErrNotAcquired", err)
	}
	if ok, err := h.Check(ctx); !ok || err != nil {
		t.Fatalf("Check: %v %v", ok, err)
	}
	u, err := h.Unlock(ctx)
	if err != nil || u != dlock.Released {
		t.Fatalf("Unlock: %v %v", u, err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("Done not closed after Unlock")
	}
	if h.Err() != nil {
		t.Fatalf("Err after Unlock: %v", h.Err())
	}
	if _, err := h.Unlock(ctx); err == nil {
		t.Fatal("second Unlock: no error")
	}
	h2, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token() <= h.Token() {
		t.Fatalf("token %d not above %d", h2.Token(), h.Token())
	}
	if ok, _ := h.Check(ctx); ok {
		t.Fatal("old token still live")
	}
	if _, err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReentrantWithOwner(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	m := c.Mutex("re", dlock.WithOwner("me"))
	h1, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h1.Token() != h2.Token() {
		t.Fatalf("reentrant token %d != %d", h2.Token(), h1.Token())
	}
	unlockWant(t, ctx, h2, dlock.StillHeld, "inner Unlock")
	unlockWant(t, ctx, h1, dlock.Released, "outer Unlock")
}

// Many goroutines share one handle: each Lock has its own owner, so they exclude
// each other like sync.Mutex.
func TestMutexExcludesGoroutines(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 60*time.Second)
	m := c.Mutex("counter")
	var inside, maxInside, total int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				h, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				if inside > maxInside {
					maxInside = inside
				}
				total++
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				inside--
				mu.Unlock()
				if u, err := h.Unlock(ctx); u != dlock.Released || err != nil {
					t.Errorf("Unlock: %v %v", u, err)
				}
			}
		}()
	}
	wg.Wait()
	if maxInside != 1 || total != 160 {
		t.Fatalf("max inside %d (want 1), total %d (want 160)", maxInside, total)
	}
}

// A wait inside its last millisecond ends with ErrTimeout (and DeadlineExceeded),
// never with the bare context error of a WAIT 0 try that raced the deadline into
// go-redis (seen in CI: a 200 ms semaphore wait whose server-side WAIT ran out
// just before the deadline), and leaves no hold behind. Deadlines of 0.2–0.9 ms
// put every wait there; before the fix one in a few hundred failed.
func TestDeadlineInTheLastMillisecond(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	h, err := c.Mutex("edge").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 400; i++ {
		tctx, cancel := context.WithTimeout(ctx, time.Duration(200+i%8*100)*time.Microsecond)
		_, err := c.Mutex("edge").Lock(tctx)
		cancel()
		if !errors.Is(err, dlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("try %d: %v, want ErrTimeout and DeadlineExceeded", i, err)
		}
	}
	unlockWant(t, ctx, h, dlock.Released, "holder Unlock")
	again, err := c.Mutex("edge").TryLock(ctx)
	if err != nil {
		t.Fatalf("a try after the holder let go: %v (a timed-out wait left a hold?)", err)
	}
	unlockWant(t, ctx, again, dlock.Released, "second Unlock")
}

func TestWaitTimeoutAndCancel(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 30*time.Second)
	h, err := c.Mutex("busy").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(ctx)

	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Mutex("busy").Lock(tctx)
	el := time.Since(start)
	if !errors.Is(err, dlock.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past deadline: %v, want ErrTimeout and DeadlineExceeded", err)
	}
	var te *dlock.TimeoutError
	if !errors.As(err, &te) || te.Key != "busy" {
		t.Fatalf("not a *TimeoutError for busy: %v", err)
	}
	if el < 250*time.Millisecond || el > 3*time.Second {
		t.Fatalf("timed out after %s, want about 300 ms", el)
	}

	if hasCommand(t, rdb, "DLOCK.CANCEL") {
		// DLOCK.CANCEL goes out in the background (it never holds up the caller).
		eventually(t, 500*time.Millisecond, "no waiter left after the deadline", func() bool { return waiters(t, rdb, "busy") == 0 })
	}

	cctx, cancel2 := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := c.Mutex("busy").Lock(cctx); done <- err }()
	eventually(t, 5*time.Second, "the waiter is queued", func() bool { return waiters(t, rdb, "busy") == 1 })
	start = time.Now()
	cancel2()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || errors.Is(err, dlock.ErrTimeout) {
			t.Fatalf("cancelled Lock: %v, want context.Canceled", err)
		}
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Fatalf("cancelled Lock returned after %s", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled Lock did not return")
	}
	if hasCommand(t, rdb, "DLOCK.CANCEL") {
		// DLOCK.CANCEL goes out in the background (it never holds up the caller).
		eventually(t, 500*time.Millisecond, "no waiter left after cancel", func() bool { return waiters(t, rdb, "busy") == 0 })
	}
}

// A context cancelled during a fair wait frees the queue place at once: the next
// owner is granted within milliseconds of the release, not after
// dlock.fair-queue-timeout-ms (5 s).
func TestFairCancelFreesPlace(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	if !hasCommand(t, rdb, "DLOCK.CANCEL") {
		t.Skipf("the module %s has no DLOCK.CANCEL (an older build): this test needs it", modulePath())
	}
	c := dlock.New(rdb, dlock.Options{WaitSlice: 200 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	fair := c.FairMutex("fifo")
	a, err := fair.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// B queues first, C after it.
	bctx, cancelB := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() { _, err := fair.Lock(bctx); bDone <- err }()
	eventually(t, 5*time.Second, "B queued", func() bool { return waiters(t, rdb, "fifo") == 1 })
	cGot := make(chan time.Time, 1)
	var cHold *dlock.Hold
	go func() {
		h, err := fair.Lock(ctx)
		if err != nil {
			t.Error(err)
			close(cGot)
			return
		}
		cHold = h
		cGot <- time.Now()
	}()
	eventually(t, 5*time.Second, "C queued", func() bool { return waiters(t, rdb, "fifo") == 2 })
	// B's slice ends and it polls again: its place is kept between slices; cancel
	// then, and at any other moment, gives it up at once.
	time.Sleep(250 * time.Millisecond)
	cancelB()
	if err := <-bDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("B: %v", err)
	}
	eventually(t, 500*time.Millisecond, "one place (C's) after B cancelled", func() bool { return waiters(t, rdb, "fifo") == 1 })
	released := time.Now()
	if _, err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at, ok := <-cGot:
		if !ok {
			t.FailNow()
		}
		if d := at.Sub(released); d > time.Second {
			t.Fatalf("C granted %s after the release, want milliseconds", d)
		} else {
			t.Logf("C granted %s after the release", d)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("C not granted within 4 s of the release (B's place was kept?)")
	}
	_, _ = cHold.Unlock(ctx)
}

func TestFairTryLockLeavesNoPlace(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 30*time.Second)
	fair := c.FairMutex("fifo2")
	a, err := fair.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fair.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock: %v", err)
	}
	if hasCommand(t, rdb, "DLOCK.CANCEL") {
		eventually(t, 500*time.Millisecond, "no place left by TryLock", func() bool { return waiters(t, rdb, "fifo2") == 0 })
	}
	_, _ = a.Unlock(ctx)
}

func TestHandoffToWaiter(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 30*time.Second)
	h, err := c.Mutex("hand").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Hold, 1)
	go func() {
		h2, err := c.Mutex("hand").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- h2
	}()
	eventually(t, 5*time.Second, "waiter queued", func() bool { return waiters(t, rdb, "hand") == 1 })
	released := time.Now()
	_, _ = h.Unlock(ctx)
	h2 := <-got
	if h2 == nil {
		t.FailNow()
	}
	if d := time.Since(released); d > time.Second {
		t.Fatalf("handoff took %s", d)
	}
	if h2.Token() <= h.Token() {
		t.Fatal("token did not grow")
	}
	_, _ = h2.Unlock(ctx)
}

func TestLostSignals(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	ctx := ctxT(t, 30*time.Second)

	// An explicit lease: Done closes when it runs out.
	c := dlock.New(rdb)
	h, err := c.Mutex("short", dlock.WithLease(300*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the lease")
	}
	if !errors.Is(h.Err(), dlock.ErrLost) {
		t.Fatalf("Err: %v", h.Err())
	}
	unlockWant(t, ctx, h, dlock.Lost, "Unlock after lease end")

	// The watchdog keeps a hold past its lease; a renewal answering 0 closes Done.
	c = dlock.New(rdb, dlock.Options{Lease: 600 * time.Millisecond})
	h, err = c.Mutex("dog").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if h.Lost() {
		t.Fatalf("lost while the watchdog renews: %v", h.Err())
	}
	if ok, _ := h.Check(ctx); !ok {
		t.Fatal("the watchdog did not keep the hold")
	}
	if err := rdb.Do(ctx, "DLOCK.FORCERELEASE", "dog").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after a force-release")
	}
	if !errors.Is(h.Err(), dlock.ErrLost) || !errors.Is(h.Err(), dlock.ErrNotHeld) {
		t.Fatalf("Err: %v, want ErrLost and ErrNotHeld", h.Err())
	}
	hctx, cancel := h.Context(context.Background())
	defer cancel()
	<-hctx.Done()
	if !errors.Is(context.Cause(hctx), dlock.ErrLost) {
		t.Fatalf("hold context cause: %v", context.Cause(hctx))
	}
	unlockWant(t, ctx, h, dlock.Lost, "Unlock after force-release")
}

func TestRWMutex(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	rw := c.RWMutex("doc")
	r1, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("writer while read: %v", err)
	}
	got := make(chan *dlock.Hold, 1)
	go func() {
		w, err := rw.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	_, _ = r1.Unlock(ctx)
	_, _ = r2.Unlock(ctx)
	w := <-got
	if w == nil {
		t.FailNow()
	}
	unlockWant(t, ctx, w, dlock.Released, "writer Unlock")

	// Upgrade and downgrade with one owner.
	me := c.RWMutex("doc2", dlock.WithOwner("me"))
	r, _ := me.RLock(ctx)
	wr, err := me.Lock(ctx)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	unlockWant(t, ctx, wr, dlock.Released, "WRITE release")
	unlockWant(t, ctx, r, dlock.Released, "READ release")
}

func TestSemaphore(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	a := c.Semaphore("pool", 3)
	b := c.Semaphore("pool", 3)
	if err := a.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if b.TryAcquire(2) {
		t.Fatal("2 more permits of 3 with 2 taken")
	}
	if !b.TryAcquire(1) {
		t.Fatal("the third permit")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := a.Acquire(short, 1); !errors.Is(err, dlock.ErrTimeout) {
		t.Fatalf("a fourth permit: %v, want ErrTimeout", err)
	}
	got := make(chan error, 1)
	go func() { got <- a.Acquire(ctx, 1) }()
	time.Sleep(50 * time.Millisecond)
	if err := b.Release(1); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if a.Held() != 3 || a.Hold() == nil || a.Hold().Token() <= 0 {
		t.Fatalf("held %d", a.Held())
	}
	if err := b.Release(1); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("release of a permit not held: %v, want ErrNotHeld", err)
	}
	if ok, err := c.Semaphore("pool", 5).TryAcquireErr(ctx, 1); ok || err == nil || !contains(err.Error(), "LIMIT") {
		t.Fatalf("another limit: %v %v, want an error naming the limit", ok, err)
	}
	if err := a.Release(3); err != nil {
		t.Fatal(err)
	}
	if a.Held() != 0 || a.Hold() != nil {
		t.Fatal("still holding after releasing all")
	}
}

func TestLatch(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	l := c.Latch("start")
	if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v %v", ok, err)
	}
	if ok, _ := l.TrySetCount(ctx, 5); ok {
		t.Fatal("second TrySetCount")
	}
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if err := l.Wait(short); !errors.Is(err, dlock.ErrTimeout) {
		t.Fatalf("Wait on a closed latch: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	if n, _ := l.CountDown(ctx); n != 1 {
		t.Fatalf("count %d", n)
	}
	if n, _ := l.CountDown(ctx); n != 0 {
		t.Fatalf("count %d", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if open, err := l.IsOpen(ctx); !open || err != nil {
		t.Fatalf("IsOpen: %v %v", open, err)
	}
}

func TestTypedErrors(t *testing.T) {
	s := startServer(t, []string{"dlock.max-queue", "1"})
	rdb := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 30*time.Second)

	fair, err := c.FairMutex("k").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Mutex("k").TryLock(ctx)
	var de *dlock.Error
	if !errors.Is(err, dlock.ErrWrongKind) || !errors.As(err, &de) || de.Code() != "WRONGKIND" {
		t.Fatalf("mutex on a fair lock: %v", err)
	}
	var re redis.Error
	if !errors.As(err, &re) {
		t.Fatalf("does not unwrap to redis.Error: %v", err)
	}
	rdb.Set(ctx, "plain", "x", 0)
	if _, err := c.Mutex("plain").TryLock(ctx); !errors.Is(err, dlock.ErrWrongKind) {
		t.Fatalf("mutex on a string: %v", err)
	}

	// dlock.max-queue 1: a second waiter is refused.
	w1 := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	go func() { _, err := c.FairMutex("k").Lock(wctx); w1 <- err }()
	eventually(t, 5*time.Second, "first waiter queued", func() bool { return waiters(t, rdb, "k") == 1 })
	if _, err := c.FairMutex("k").Lock(ctx); !errors.Is(err, dlock.ErrQueueFull) {
		t.Fatalf("second waiter: %v, want ErrQueueFull", err)
	}
	cancel()
	<-w1
	_, _ = fair.Unlock(ctx)

	// Deadlock: A holds x and waits for y; B holds y and asks for x.
	a := c.Mutex("x", dlock.WithOwner("A"))
	b := c.Mutex("y", dlock.WithOwner("B"))
	ha, _ := a.Lock(ctx)
	hb, _ := b.Lock(ctx)
	aw := make(chan error, 1)
	actx, acancel := context.WithCancel(ctx)
	go func() { _, err := c.Mutex("y", dlock.WithOwner("A")).Lock(actx); aw <- err }()
	eventually(t, 5*time.Second, "A waits for y", func() bool { return waiters(t, rdb, "y") == 1 })
	_, err = c.Mutex("x", dlock.WithOwner("B")).Lock(ctx)
	var dle *dlock.DeadlockError
	if !errors.Is(err, dlock.ErrDeadlock) || !errors.As(err, &dle) {
		t.Fatalf("closing a cycle: %v, want a *DeadlockError", err)
	}
	if len(dle.Cycle) != 2 || dle.Cycle[0].Owner != "B" || dle.Cycle[0].WaitsFor != "A" || dle.Cycle[0].Key != "x" {
		t.Fatalf("cycle %+v", dle.Cycle)
	}
	acancel()
	<-aw
	_, _ = ha.Unlock(ctx)
	_, _ = hb.Unlock(ctx)

	// Durable grants: no replicas acknowledge.
	_, err = c.Mutex("d", dlock.WithReplicas(1, 100*time.Millisecond)).Lock(ctx)
	var nd *dlock.NotDurableError
	if !errors.Is(err, dlock.ErrNotDurable) || !errors.As(err, &nd) || nd.Wanted != 1 || nd.Acked != 0 {
		t.Fatalf("durable grant without replicas: %v", err)
	}
	if info(t, rdb, "d") != nil {
		t.Fatal("the non-durable grant was not released")
	}
	rdb.ConfigSet(ctx, "min-replicas-to-write", "1")
	if _, err := c.Mutex("d").TryLock(ctx); !errors.Is(err, dlock.ErrNoReplicas) {
		t.Fatalf("under min-replicas-to-write: %v, want ErrNoReplicas", err)
	}
	rdb.ConfigSet(ctx, "min-replicas-to-write", "0")
}

func TestModuleNotLoaded(t *testing.T) {
	s := startPlain(t)
	c := dlock.New(s.client(t))
	_, err := c.Mutex("k").Lock(ctxT(t, 10*time.Second))
	if !errors.Is(err, dlock.ErrModuleNotLoaded) {
		t.Fatalf("no module: %v", err)
	}
	for _, want := range []string{"not loaded", "MODULE LIST", "--loadmodule"} {
		if !contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestBindAndLockDelay(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 30*time.Second)
	h, err := c.Mutex("bound", dlock.WithBind()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlockWant(t, ctx, h, dlock.Released, "bound Unlock")
	// A bound hold ends when its connection closes: kill every other client.
	h, err = c.Mutex("bound", dlock.WithBind()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := s.client(t)
	if err := other.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the bound hold ends", func() bool { return info(t, other, "bound") == nil })
	_, _ = h.Unlock(ctx)

	// LOCKDELAY: a hold that ran out keeps excluding for the delay.
	m := c.Mutex("delayed", dlock.WithLease(100*time.Millisecond), dlock.WithLockDelay(400*time.Millisecond))
	start := time.Now()
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	h2, err := c.Mutex("delayed").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 450*time.Millisecond {
		t.Fatalf("granted %s after a 100 ms lease with a 400 ms lock-delay", el)
	}
	_, _ = h2.Unlock(ctx)
}
