package dlock_test

// etcd's concurrency shapes (issue 45): Session, NewLocker, ResumeElection, Observe,
// and a hold's TTL/Until.

import (
	"context"
	"strings"
	"testing"
	"time"

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
