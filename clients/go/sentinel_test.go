package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	dlock "github.com/dlock/dlock/clients/go"
)

// startSentinel starts a Sentinel watching the master at masterPort as "mymaster".
func startSentinel(t *testing.T, masterPort int) string {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds mymaster 2000\n", port, masterPort)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(serverBin(), conf, "--sentinel", "--logfile", filepath.Join(dir, "sentinel.log"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sentinel: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	eventually(t, 15*time.Second, "the sentinel knows the master", func() bool {
		a, err := sc.GetMasterAddrByName(context.Background(), "mymaster").Result()
		return err == nil && len(a) == 2 && a[1] == fmt.Sprint(masterPort)
	})
	return addr
}

// Through Sentinel (a failover client), with a replica: locks, BIND, and durable grants
// that the replica acknowledges.
func TestSentinelAndDurable(t *testing.T) {
	master := startServer(t, nil)
	replica := startServer(t, nil, "--replicaof", "127.0.0.1", fmt.Sprint(master.port))
	ctx := ctxT(t, 60*time.Second)
	mc := master.client(t)
	eventually(t, 20*time.Second, "the replica is online", func() bool {
		s, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(s, "connected_slaves:1") && strings.Contains(s, "state=online")
	})
	sentinel := startSentinel(t, master.port)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel}})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)

	h, err := c.Mutex("job", dlock.WithReplicas(1, 2*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatalf("durable grant with one replica: %v", err)
	}
	rc := replica.client(t)
	eventually(t, 5*time.Second, "the replica has the hold", func() bool {
		n, err := rc.Do(ctx, "DLOCK.CHECK", "job", h.Token()).Int64()
		return err == nil && n == 1
	})
	if _, err := c.Mutex("job", dlock.WithReplicas(2, 100*time.Millisecond)).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while held: %v", err)
	}
	unlockWant(t, ctx, h, dlock.Released, "Unlock")
	_, err = c.Mutex("job", dlock.WithReplicas(2, 100*time.Millisecond)).Lock(ctx)
	if !errors.Is(err, dlock.ErrNotDurable) {
		t.Fatalf("2 replicas wanted, 1 there: %v", err)
	}
	b, err := c.Mutex("bound", dlock.WithBind()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlockWant(t, ctx, b, dlock.Released, "bound Unlock")
}
