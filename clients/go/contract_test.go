package dlock_test

// The client contract (docs/clients.md), one test per rule that issue 43 found broken
// in this client, against real servers and a real Toxiproxy.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	dlock "github.com/dlock/dlock/clients/go"
)

// A silent partition with go-redis' defaults and a 2 s watchdog lease: Done closes
// before another client is granted the lock (rule 1; issue 43 saw it 3.7 s after).
func TestPartitionToldBeforeOtherGrant(t *testing.T) {
	s := startServer(t, nil)
	p := startProxy(t, s.addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb, dlock.Options{Lease: 2 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	h, err := c.Mutex("part").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	p.partition()
	cut := time.Now()
	granted := make(chan time.Time, 1)
	other := s.client(t)
	go func() {
		if err := other.Do(context.Background(), "DLOCK.ACQUIRE", "part", "other", "PX", 10000, "WAIT", 20000).Err(); err != nil {
			t.Errorf("the other client's acquire: %v", err)
		}
		granted <- time.Now()
	}()
	var lost time.Time
	select {
	case <-h.Done():
		lost = time.Now()
	case <-time.After(15 * time.Second):
		t.Fatal("Done not closed within 15 s of a silent partition")
	}
	var grant time.Time
	select {
	case grant = <-granted:
	case <-time.After(15 * time.Second):
		t.Fatal("the other client was not granted within 15 s")
	}
	t.Logf("partition at 0, told at %s, other client granted at %s", lost.Sub(cut).Round(time.Millisecond), grant.Sub(cut).Round(time.Millisecond))
	if lost.After(grant) {
		t.Fatalf("told %s after the other client's grant", lost.Sub(grant).Round(time.Millisecond))
	}
	if !errors.Is(h.Err(), dlock.ErrLost) || h.Reason() != dlock.LostUnreachable {
		t.Fatalf("Err after Done: %v (reason %q), want ErrLost, unreachable", h.Err(), h.Reason())
	}
	p.heal()
	if u, err := h.Unlock(ctx); (u != dlock.Lost && u != dlock.Unknown) || (u == dlock.Unknown) != errors.Is(err, dlock.ErrUnknown) {
		t.Fatalf("Unlock after the partition: %v %v, want lost or unknown", u, err)
	}
}

// A hold that the server ended is reported within one round trip of the notice (rule
// 2; issue 43 saw 10 s for a killed BIND connection, alone and in a MultiLock).
func TestServerEndToldPromptly(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	admin := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 60*time.Second)
	killBound := func(key string) {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " cmd=dlock.acquire") {
				id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
				if err := admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("no connection of a BIND acquire of %s in CLIENT LIST:\n%s", key, list)
		}
	}
	type held interface {
		Done() <-chan struct{}
		Reason() dlock.LostReason
	}
	cases := []struct {
		name   string
		take   func(key string) (held, error)
		end    func(key string)
		reason dlock.LostReason
	}{
		{"forcerelease", func(k string) (held, error) { return c.Mutex(k).Lock(ctx) },
			func(k string) { admin.Do(ctx, "DLOCK.FORCERELEASE", k) }, dlock.LostForced},
		{"forcerelease-semaphore", func(k string) (held, error) {
			sem := c.Semaphore(k, 2)
			if err := sem.Acquire(ctx, 1); err != nil {
				return nil, err
			}
			return sem.Hold(), nil
		}, func(k string) { admin.Do(ctx, "DLOCK.FORCERELEASE", k) }, dlock.LostForced},
		{"delete", func(k string) (held, error) { return c.Mutex(k).Lock(ctx) },
			func(k string) { admin.Del(ctx, k) }, dlock.LostDeleted},
		{"bind-kill", func(k string) (held, error) { return c.Mutex(k, dlock.WithBind()).Lock(ctx) }, killBound, dlock.LostDisconnected},
		{"multi-bind-kill", func(k string) (held, error) {
			return dlock.NewMultiLock(c.Mutex(k+"a", dlock.WithBind()), c.Mutex(k+"b", dlock.WithBind())).Lock(ctx)
		}, killBound, dlock.LostDisconnected},
		{"election-forcerelease", func(k string) (held, error) {
			e := c.Election(k)
			if err := e.Campaign(ctx, "v"); err != nil {
				return nil, err
			}
			return e.Term(), nil
		}, func(k string) { admin.Do(ctx, "DLOCK.FORCERELEASE", k) }, dlock.LostForced},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := tc.take(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			at := time.Now()
			tc.end(tc.name)
			select {
			case <-h.Done():
				t.Logf("told %s after the server's act", time.Since(at).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				t.Fatal("Done not closed within 5 s of the server ending the hold")
			}
			if late := time.Since(at); late > time.Second {
				t.Fatalf("told %s after the server's act, want within 1 s", late.Round(time.Millisecond))
			}
			if r := h.Reason(); r != tc.reason {
				t.Fatalf("reason %q, want %q", r, tc.reason)
			}
		})
	}
}

// Server down: Lock with a 3 s deadline ends within 250 ms of it with ErrTimeout
// carrying the connection error (rule 4; issue 43 saw the raw dial error at 3.4 s).
func TestDeadlineServerDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Mutex("down").Lock(ctx)
	took := time.Since(start)
	t.Logf("Lock: %v after %s", err, took.Round(time.Millisecond))
	if took > 3250*time.Millisecond {
		t.Fatalf("Lock returned %s after its start, want within 3.25 s", took.Round(time.Millisecond))
	}
	var te *dlock.TimeoutError
	if !errors.Is(err, dlock.ErrTimeout) || !errors.As(err, &te) || te.LastErr == nil {
		t.Fatalf("Lock: %v, want ErrTimeout carrying the connection error", err)
	}
	// A try reports the connection error at once.
	start = time.Now()
	_, err = c.Mutex("down").TryLock(context.Background())
	if took := time.Since(start); !errors.Is(err, dlock.ErrConnection) || took > time.Second {
		t.Fatalf("TryLock: %v after %s, want ErrConnection within 1 s", err, took.Round(time.Millisecond))
	}
}

// A deadline holds under a silent partition too (rule 4).
func TestDeadlinePartition(t *testing.T) {
	s := startServer(t, nil)
	p := startProxy(t, s.addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p.partition()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Mutex("cut").Lock(ctx)
	took := time.Since(start)
	t.Logf("Lock: %v after %s", err, took.Round(time.Millisecond))
	if !errors.Is(err, dlock.ErrTimeout) || took > 3250*time.Millisecond {
		t.Fatalf("Lock: %v after %s, want ErrTimeout within 3.25 s", err, took.Round(time.Millisecond))
	}
	p.heal()
}

// A try with an expired context sends nothing and returns at once (issue 43: 1.7 s of
// DLOCK.CANCEL to a dead server).
func TestTryExpiredContext(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	start := time.Now()
	_, err := c.FairMutex("down").TryLock(ctx)
	took := time.Since(start)
	t.Logf("TryLock: %v after %s", err, took.Round(time.Millisecond))
	if took > 100*time.Millisecond {
		t.Fatalf("TryLock with an expired context took %s, want at once", took.Round(time.Millisecond))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock: %v, want the context's error", err)
	}
}

// Bad input is refused before anything is sent, naming the argument (rule 5; issue
// 43: WithLease(-5s) became the watchdog lease, Lock(nil) panicked).
func TestBadInputRefused(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	ctx := ctxT(t, 30*time.Second)
	dlockStats := func() string {
		v, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, line := range strings.Split(v, "\n") {
			if strings.HasPrefix(line, "cmdstat_dlock.") {
				out = append(out, strings.TrimSpace(line))
			}
		}
		return strings.Join(out, "\n")
	}
	before := dlockStats()
	c := dlock.New(rdb)
	cases := []struct {
		name, arg string
		do        func() error
	}{
		{"negative lease", "lease (WithLease)", func() error { _, err := c.Mutex("k", dlock.WithLease(-5*time.Second)).Lock(ctx); return err }},
		{"zero lease", "lease (WithLease)", func() error { _, err := c.Mutex("k", dlock.WithLease(0)).TryLock(ctx); return err }},
		{"lease over 2^40 ms", "lease (WithLease)", func() error {
			_, err := c.Mutex("k", dlock.WithLease((1<<41)*time.Millisecond)).Lock(ctx)
			return err
		}},
		{"empty key", "key", func() error { _, err := c.Mutex("").Lock(ctx); return err }},
		{"renew interval not below the lease", "Options.RenewInterval", func() error {
			_, err := dlock.New(rdb, dlock.Options{Lease: 2 * time.Second, RenewInterval: 2 * time.Second}).Mutex("k").Lock(ctx)
			return err
		}},
		{"semaphore permits over its limit", "permits", func() error { return c.Semaphore("s", 2).Acquire(ctx, 3) }},
		{"nil context", "ctx", func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			//lint:ignore SA1012 a nil context is the bad input under test
			_, err = c.Mutex("k").Lock(nil) //nolint:staticcheck
			return err
		}},
	}
	for _, tc := range cases {
		err := tc.do()
		t.Logf("%s: %v", tc.name, err)
		var ie *dlock.InvalidArgumentError
		if !errors.Is(err, dlock.ErrInvalidArgument) || !errors.As(err, &ie) || ie.Argument != tc.arg {
			t.Errorf("%s: %v, want ErrInvalidArgument naming %q", tc.name, err, tc.arg)
		}
	}
	if after := dlockStats(); after != before {
		t.Errorf("DLOCK.* commands reached the server:\nbefore: %q\nafter: %q", before, after)
	}
}

// Unlock ends ownership whatever happens (rule 3): after CLIENT KILL of every
// connection, Unlock answers released, lost or unknown, and nothing renews the hold
// after it.
func TestUnlockAfterConnectionsKilled(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	admin := s.client(t)
	c := dlock.New(rdb, dlock.Options{Lease: 3 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 30*time.Second)
	h, err := c.Mutex("killed").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	u, err := h.Unlock(ctx)
	t.Logf("Unlock: %v %v", u, err)
	if u != dlock.Released && u != dlock.Lost && u != dlock.Unknown {
		t.Fatalf("Unlock: %v %v, want released, lost or unknown", u, err)
	}
	renewals := func() string {
		v, err := admin.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(v, "\n") {
			if strings.HasPrefix(line, "cmdstat_dlock.renew:") {
				calls, _, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_dlock.renew:"), ",")
				return calls
			}
		}
		return "calls=0"
	}
	before := renewals()
	time.Sleep(2 * time.Second)
	if after := renewals(); after != before {
		t.Fatalf("renewed after Unlock: %s, then %s", before, after)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("Done not closed after Unlock")
	}
}

// Close stops everything, is idempotent, reports held holds lost, and refuses calls
// after it (rule 6).
func TestCloseTwice(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 30*time.Second)
	h, err := c.Mutex("closing").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("a held hold not told after Close")
	}
	if !errors.Is(h.Err(), dlock.ErrLost) {
		t.Fatalf("Err after Close: %v", h.Err())
	}
	if _, err := c.Mutex("closing").TryLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryLock after Close: %v, want ErrClosed", err)
	}
}
