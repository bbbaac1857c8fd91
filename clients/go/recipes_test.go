package dlock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	dlock "github.com/dlock/dlock/clients/go"
)

func TestMultiLock(t *testing.T) {
	s := startServer(t, nil)
	rdb := s.client(t)
	c := dlock.New(rdb)
	ctx := ctxT(t, 30*time.Second)
	ml := dlock.NewMultiLock(c.Mutex("b"), c.Mutex("a"), c.RWMutex("c").RLocker())
	mh, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if keys := []string{mh.Holds()[0].Key(), mh.Holds()[1].Key(), mh.Holds()[2].Key()}; keys[0] != "a" || keys[1] != "b" || keys[2] != "c" {
		t.Fatalf("key order %v", keys)
	}
	// All or none: with b held elsewhere, a TryLock takes nothing.
	if _, err := dlock.NewMultiLock(c.Mutex("a2"), c.Mutex("b")).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock with b held: %v", err)
	}
	if info(t, rdb, "a2") != nil {
		t.Fatal("a2 kept after a failed MultiLock")
	}
	unlockWant(t, ctx, mh, dlock.Released, "Unlock")
	<-mh.Done()
}

func TestRedLock(t *testing.T) {
	var clients []*dlock.Client
	var servers []*server
	for i := 0; i < 3; i++ {
		s := startServer(t, nil)
		servers = append(servers, s)
		// No retries and a short dial timeout: one server is killed below.
		rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, dlock.New(rdb))
	}
	ctx := ctxT(t, 30*time.Second)
	rl := dlock.NewRedLock(clients, "rl", 2*time.Second)
	h, err := rl.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range h.Tokens() {
		if tok <= 0 {
			t.Fatalf("server %d gave no token", i)
		}
	}
	if _, err := rl.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second RedLock: %v", err)
	}
	if err := h.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	unlockWant(t, ctx, h, dlock.Released, "Unlock")
	// One server down: a majority still grants.
	_ = servers[2].cmd.Process.Kill()
	h, err = rl.Lock(ctx)
	if err != nil {
		t.Fatalf("with 2 of 3 servers: %v", err)
	}
	_, _ = h.Unlock(ctx)
}

func TestRunOnce(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	var runs atomic.Int32
	job := func(ctx context.Context, h *dlock.Hold) error {
		runs.Add(1)
		if h.Token() <= 0 {
			t.Error("no token")
		}
		return nil
	}
	o := dlock.RunOnceOptions{AtMostFor: 5 * time.Second, AtLeastFor: 400 * time.Millisecond}
	if out, err := dlock.RunOnce(ctx, c, "nightly", o, job); out != dlock.Ran || err != nil {
		t.Fatalf("first run: %v %v", out, err)
	}
	// Kept for at least 400 ms after the start: another replica skips.
	if out, _ := dlock.RunOnce(ctx, c, "nightly", o, job); out != dlock.Skipped {
		t.Fatalf("second run within at-least-for: %v", out)
	}
	time.Sleep(500 * time.Millisecond)
	if out, _ := dlock.RunOnce(ctx, c, "nightly", o, job); out != dlock.Ran {
		t.Fatalf("run after at-least-for: %v", out)
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", runs.Load())
	}
	// A job that outlives at-most-for is lost, and its context is cancelled.
	short := dlock.RunOnceOptions{AtMostFor: 200 * time.Millisecond}
	out, err := dlock.RunOnce(ctx, c, "slow", short, func(jctx context.Context, h *dlock.Hold) error {
		select {
		case <-jctx.Done():
			return context.Cause(jctx)
		case <-time.After(5 * time.Second):
			return errors.New("job context not cancelled")
		}
	})
	if out != dlock.RunLost || !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("slow job: %v %v", out, err)
	}
	// With Renew it outlives the lease.
	out, err = dlock.RunOnce(ctx, c, "renewed", dlock.RunOnceOptions{AtMostFor: 300 * time.Millisecond, Renew: true},
		func(jctx context.Context, h *dlock.Hold) error { time.Sleep(700 * time.Millisecond); return jctx.Err() })
	if out != dlock.Ran || err != nil {
		t.Fatalf("renewed job: %v %v", out, err)
	}
}

func TestElection(t *testing.T) {
	s := startServer(t, nil)
	c := dlock.New(s.client(t))
	ctx := ctxT(t, 30*time.Second)
	e1 := c.Election("leader", dlock.WithBind(), dlock.WithOwner("n1"))
	e2 := c.Election("leader", dlock.WithBind(), dlock.WithOwner("n2"))
	if _, err := e1.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v", err)
	}
	if err := e1.Campaign(ctx, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := e2.Observe(octx)
	if l := <-obs; l.Owner != "n1" || l.Value != "10.0.0.1" || l.Token != e1.Rev() {
		t.Fatalf("first observed %+v", l)
	}
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "10.0.0.2") }()
	if err := e1.Proclaim(ctx, "10.0.0.9"); err != nil {
		t.Fatal(err)
	}
	if l := <-obs; l.Owner != "n1" || l.Value != "10.0.0.9" {
		t.Fatalf("after proclaim %+v", l)
	}
	time.Sleep(100 * time.Millisecond)
	resigned := time.Now()
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	for l := range obs {
		if l.Owner == "n2" && l.Value == "10.0.0.2" {
			t.Logf("observers saw the next leader %s after the resign", time.Since(resigned))
			break
		}
	}
	if err := e1.Proclaim(ctx, "x"); !errors.Is(err, dlock.ErrNotLeader) {
		t.Fatalf("proclaim after resign: %v", err)
	}
	if l, err := e1.Leader(ctx); err != nil || l.Owner != "n2" || l.Token != e2.Rev() {
		t.Fatalf("Leader: %+v %v", l, err)
	}
	select {
	case <-e2.Done():
		t.Fatal("term over")
	default:
	}
	// A force-release ends the term at once (the monitor), not at the next renewal.
	if err := s.client(t).Do(ctx, "DLOCK.FORCERELEASE", "leader").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e2.Done():
		if !errors.Is(e2.Term().Err(), dlock.ErrNotHeld) {
			t.Fatalf("term error: %v", e2.Term().Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the term did not end within 5 s of a force-release")
	}
	if err := e2.Resign(ctx); !errors.Is(err, dlock.ErrNotLeader) {
		t.Fatalf("Resign after the term ended: %v", err)
	}
}

// The README's first go block runs from a fresh module (go mod init, a replace
// pointing at this directory) against a server with the module.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```go\n")
	src, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(src, "package main") || !strings.Contains(src, `"localhost:6379"`) {
		t.Fatal("README.md: the first go block is not a main package connecting to localhost:6379")
	}
	s := startServer(t, nil)
	src = strings.Replace(src, `"localhost:6379"`, `"`+s.addr+`"`, 1)
	here, _ := os.Getwd()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	gosum, _ := os.ReadFile("go.sum")
	_ = os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644)
	goBin := os.Getenv("GO") // the Makefile passes its go command
	if goBin == "" {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command on PATH (set GO=/path/to/go)")
		}
	}
	for _, args := range [][]string{
		{"mod", "init", "quickstart"},
		{"mod", "edit", "-require=github.com/dlock/dlock/clients/go@v0.0.0", "-replace=github.com/dlock/dlock/clients/go=" + here},
		{"mod", "tidy"},
		{"run", "."},
	} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "run" {
			if !strings.Contains(string(out), "fencing token:") || !strings.Contains(string(out), "unlock: released <nil>") {
				t.Fatalf("quick start printed:\n%s", out)
			}
			t.Logf("quick start:\n%s", out)
		}
	}
}
