package dlock_test

// etcd's concurrency shapes (issue 45): Session, NewLocker, ResumeElection, Observe,
// and a hold's TTL/Until.

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

// Observe never shows a leader without its value (etcd never does): a new leader is
// shown once it has proclaimed.
func TestObserveShowsLeadersWithTheirValue(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 60*time.Second)
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := c.Election("obs", dlock.WithOwner("watcher")).Observe(octx)
	var seen []dlock.Leader
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l := range obs {
			seen = append(seen, l)
		}
	}()
	var prev *dlock.Election
	for i := 0; i < 6; i++ {
		e := c.Election("obs", dlock.WithOwner("n"+string(rune('0'+i))))
		won := make(chan error, 1)
		go func() { won <- e.Campaign(ctx, "v"+string(rune('0'+i))) }()
		time.Sleep(50 * time.Millisecond)
		if prev != nil {
			if err := prev.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-won; err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		prev = e
	}
	ocancel()
	<-done
	for _, l := range seen {
		if l.Owner != "" && !l.HasValue {
			t.Fatalf("Observe showed leader %q without its value; all seen: %+v", l.Owner, seen)
		}
	}
	if len(seen) < 6 {
		t.Fatalf("Observe showed %d leaders, want the 6: %+v", len(seen), seen)
	}
}

// An Election binds its term to a connection of its own by default: a leader whose
// connection dies (the process crashed) is replaced at once, not after its lease.
func TestElectionBindsByDefault(t *testing.T) {
	s := startServer(t, nil)
	admin := s.client(t)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 60*time.Second)
	e1 := c.Election("crash", dlock.WithOwner("n1"))
	if err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	e2 := c.Election("crash", dlock.WithOwner("n2"))
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "b") }()
	eventually(t, 5*time.Second, "n2 queued", func() bool { return waiters(t, admin, "crash") == 1 })
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	n := 0
	for _, line := range strings.Split(list, "\n") {
		// The term's own connection: its last command was the grant (not a WAIT, which
		// n2's connection is still in).
		if strings.Contains(line, " cmd=dlock.fairacquire") && !strings.Contains(line, " flags=b") {
			id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
			if err := admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n != 1 {
		t.Fatalf("found %d connections of the leader's grant, want 1 (a term bound to its own connection):\n%s", n, list)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("n2 led %s after n1's connection died", time.Since(killed).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("n2 not leader within 3 s of n1's connection dying")
	}
	select {
	case <-e1.Done():
	case <-time.After(time.Second):
		t.Fatal("n1 not told within 1 s")
	}
	if r := e1.Term().Reason(); r != dlock.LostDisconnected {
		t.Fatalf("n1's reason: %q (%v)", r, e1.Term().Err())
	}
}

// A Session keeps many holds alive with one keepalive (etcd's Session): they outlive
// the TTL, one pipelined round renews them all, Close releases them and closes Done.
func TestSession(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 60*time.Second)
	sess, err := c.NewSession(ctx, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var holds []*dlock.Hold
	for _, k := range []string{"s1", "s2", "s3"} {
		h, err := sess.Mutex(k).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	r, err := sess.RWMutex("s4").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holds = append(holds, r)
	renews := func() (n int) {
		v, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(v, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_dlock.renew:calls="); ok {
				calls, _, _ := strings.Cut(rest, ",")
				_, _ = fmt.Sscan(calls, &n)
			}
		}
		return n
	}
	before := renews()
	time.Sleep(2500 * time.Millisecond) // 2.5 TTLs
	after := renews()
	for _, h := range holds {
		if h.Lost() {
			t.Fatalf("%s lost while its session lasts: %v", h.Key(), h.Err())
		}
		if ok, err := h.Check(ctx); !ok || err != nil {
			t.Fatalf("%s not live on the server after 2.5 TTLs: %v", h.Key(), err)
		}
		if ttl := h.TTL(); ttl <= 0 || ttl > time.Second {
			t.Fatalf("%s TTL %s", h.Key(), ttl)
		}
	}
	// Every 333 ms, one RENEW per hold: about 7 rounds of 4.
	if n := after - before; n < 4*5 || n > 4*9 {
		t.Fatalf("%d RENEWs in 2.5 s for 4 holds, want rounds of 4 every TTL/3", n)
	}
	select {
	case <-sess.Done():
		t.Fatal("session over")
	default:
	}
	// A hold the server ends is lost alone.
	if err := rdb.Do(ctx, "DLOCK.FORCERELEASE", "s1").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-holds[0].Done():
	case <-time.After(time.Second):
		t.Fatal("s1 not told within 1 s")
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	default:
		t.Fatal("Done open after Close")
	}
	if sess.Err() != nil {
		t.Fatalf("Err after Close: %v", sess.Err())
	}
	for _, k := range []string{"s2", "s3", "s4"} {
		if info(t, rdb, k) != nil {
			t.Fatalf("%s still held after the session's Close", k)
		}
	}
	if _, err := sess.Mutex("s5").Lock(ctx); err == nil {
		t.Fatal("a lock through a closed session")
	}
}

// A Session cut off by a silent partition ends, with its holds, before another client
// is granted one of them.
func TestSessionPartition(t *testing.T) {
	s := startServer(t, nil)
	p := startProxy(t, s.addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 60*time.Second)
	sess, err := c.NewSession(ctx, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := sess.Mutex("pa").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sess.Mutex("pb").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	p.partition()
	granted := make(chan time.Time, 1)
	go func() {
		_ = s.client(t).Do(context.Background(), "DLOCK.ACQUIRE", "pa", "other", "PX", 10000, "WAIT", 20000).Err()
		granted <- time.Now()
	}()
	var lost time.Time
	select {
	case <-sess.Done():
		lost = time.Now()
	case <-time.After(10 * time.Second):
		t.Fatal("session not over within 10 s of a partition")
	}
	grant := <-granted
	if lost.After(grant) {
		t.Fatalf("session told %s after the other client's grant", lost.Sub(grant))
	}
	for _, h := range []*dlock.Hold{a, b} {
		select {
		case <-h.Done():
		case <-time.After(time.Second):
			t.Fatalf("%s not lost with its session", h.Key())
		}
		if h.Reason() != dlock.LostUnreachable {
			t.Fatalf("%s: %v", h.Key(), h.Err())
		}
	}
	if !errors.Is(sess.Err(), dlock.ErrLost) {
		t.Fatalf("session Err: %v", sess.Err())
	}
	t.Logf("session told %s before the other client's grant", grant.Sub(lost).Round(time.Millisecond))
	p.heal()
}

// NewLocker is a sync.Locker on one lock of the session.
func TestNewLocker(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 60*time.Second)
	sess, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var l sync.Locker = dlock.NewLocker(sess, "counter")
	var inside, maxInside, total int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				l.Lock()
				mu.Lock()
				inside++
				if inside > maxInside {
					maxInside = inside
				}
				total++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if maxInside != 1 || total != 80 {
		t.Fatalf("max inside %d (want 1), total %d (want 80)", maxInside, total)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of an unlocked Locker did not panic")
		}
	}()
	l.Unlock()
}

// ResumeElection takes up a live term after a restart, without campaigning.
func TestResumeElection(t *testing.T) {
	s := startServer(t, nil)
	ctx := ctxT(t, 60*time.Second)
	c1 := dlock.New(s.client(t))
	e1 := c1.Election("resume", dlock.WithoutBind(), dlock.WithLease(2*time.Second), dlock.WithOwner("host-a"))
	if err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rev := e1.Rev()
	// The process "restarts": its client stops renewing (the term's lease still runs).
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := dlock.New(s.client(t))
	t.Cleanup(func() { _ = c2.Close() })
	if _, err := c2.ResumeElection(ctx, "resume", "host-a", rev+1, dlock.WithLease(2*time.Second)); !errors.Is(err, dlock.ErrNotLeader) {
		t.Fatalf("resume with another rev: %v, want ErrNotLeader", err)
	}
	if _, err := c2.ResumeElection(ctx, "resume", "host-b", rev, dlock.WithLease(2*time.Second)); !errors.Is(err, dlock.ErrNotLeader) {
		t.Fatalf("resume by another owner: %v, want ErrNotLeader", err)
	}
	e2, err := c2.ResumeElection(ctx, "resume", "host-a", rev, dlock.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if e2.Rev() != rev {
		t.Fatalf("Rev %d, want %d", e2.Rev(), rev)
	}
	time.Sleep(3 * time.Second) // past the lease: the watchdog renews the resumed term
	if err := e2.Proclaim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	l, err := e2.Leader(ctx)
	if err != nil || l.Owner != "host-a" || l.Value != "b" || l.Token != rev {
		t.Fatalf("Leader: %+v %v", l, err)
	}
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A hold's TTL and Until answer from its lease clock.
func TestHoldTTLUntil(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 30*time.Second)
	before := time.Now()
	h, err := c.Mutex("ttl", dlock.WithLease(2*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	// Until is the send time + 2 s - 70 ms (1 % + 50 ms).
	if u := h.Until(); u.Before(before.Add(1930*time.Millisecond)) || u.After(after.Add(1930*time.Millisecond)) {
		t.Fatalf("Until %s after the call, want 1.93 s", u.Sub(before))
	}
	if ttl := h.TTL(); ttl <= 1800*time.Millisecond || ttl > 1930*time.Millisecond {
		t.Fatalf("TTL %s, want about 1.93 s", ttl)
	}
	if err := h.Renew(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := h.TTL(); ttl <= 4800*time.Millisecond || ttl > 4900*time.Millisecond {
		t.Fatalf("TTL after Renew(5 s) %s, want about 4.9 s", ttl)
	}
	unlockWant(t, ctx, h, dlock.Released, "Unlock")
	if ttl := h.TTL(); ttl != 0 {
		t.Fatalf("TTL after Unlock %s", ttl)
	}
}
