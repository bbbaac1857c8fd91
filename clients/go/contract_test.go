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
	if !errors.Is(h.Err(), dlock.ErrLost) {
		t.Fatalf("Err after Done: %v, want ErrLost", h.Err())
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
	type held interface{ Done() <-chan struct{} }
	cases := []struct {
		name string
		take func(key string) (held, error)
		end  func(key string)
	}{
		{"forcerelease", func(k string) (held, error) { return c.Mutex(k).Lock(ctx) },
			func(k string) { admin.Do(ctx, "DLOCK.FORCERELEASE", k) }},
		{"forcerelease-semaphore", func(k string) (held, error) {
			sem := c.Semaphore(k, 2)
			if err := sem.Acquire(ctx, 1); err != nil {
				return nil, err
			}
			return sem.Hold(), nil
		}, func(k string) { admin.Do(ctx, "DLOCK.FORCERELEASE", k) }},
		{"delete", func(k string) (held, error) { return c.Mutex(k).Lock(ctx) },
			func(k string) { admin.Del(ctx, k) }},
		{"bind-kill", func(k string) (held, error) { return c.Mutex(k, dlock.WithBind()).Lock(ctx) }, killBound},
		{"multi-bind-kill", func(k string) (held, error) {
			return dlock.NewMultiLock(c.Mutex(k+"a", dlock.WithBind()), c.Mutex(k+"b", dlock.WithBind())).Lock(ctx)
		}, killBound},
		{"election-forcerelease", func(k string) (held, error) {
			e := c.Election(k)
			if err := e.Campaign(ctx, "v"); err != nil {
				return nil, err
			}
			return e.Term(), nil
		}, func(k string) { admin.Do(ctx, "DLOCK.FORCERELEASE", k) }},
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
	if !errors.Is(err, dlock.ErrTimeout) {
		t.Fatalf("Lock: %v, want ErrTimeout", err)
	}
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
		name string
		do   func() error
	}{
		{"negative lease", func() error { _, err := c.Mutex("k", dlock.WithLease(-5*time.Second)).Lock(ctx); return err }},
		{"zero lease", func() error { _, err := c.Mutex("k", dlock.WithLease(0)).TryLock(ctx); return err }},
		{"lease over 2^40 ms", func() error {
			_, err := c.Mutex("k", dlock.WithLease((1<<41)*time.Millisecond)).Lock(ctx)
			return err
		}},
		{"empty key", func() error { _, err := c.Mutex("").Lock(ctx); return err }},
		{"renew interval not below the lease", func() error {
			_, err := dlock.New(rdb, dlock.Options{Lease: 2 * time.Second, RenewInterval: 2 * time.Second}).Mutex("k").Lock(ctx)
			return err
		}},
		{"nil context", func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			//lint:ignore SA1012 a nil context is the bad input under test
			_, err = c.Mutex("k").Lock(nil) //nolint:staticcheck
			if err == nil {
				err = errors.New("")
			}
			return err
		}},
	}
	for _, tc := range cases {
		err := tc.do()
		t.Logf("%s: %v", tc.name, err)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else if strings.HasPrefix(err.Error(), "panicked") {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if after := dlockStats(); after != before {
		t.Errorf("DLOCK.* commands reached the server:\nbefore: %q\nafter: %q", before, after)
	}
}
