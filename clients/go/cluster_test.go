package dlock_test

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

// startCluster starts three masters with the module (cluster mode), splits the slots
// between them with CLUSTER ADDSLOTSRANGE and joins them with CLUSTER MEET.
func startCluster(t *testing.T) ([]*server, *redis.ClusterClient) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	var nodes []*server
	for i := 0; i < 3; i++ {
		nodes = append(nodes, startServer(t, nil, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"))
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range nodes {
		c := n.client(t)
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatalf("ADDSLOTSRANGE: %v", err)
		}
		if i > 0 {
			if err := c.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", nodes[0].port).Err(); err != nil {
				t.Fatalf("MEET: %v", err)
			}
		}
	}
	for _, n := range nodes {
		c := n.client(t)
		eventually(t, 30*time.Second, "cluster_state:ok and 3 known nodes", func() bool {
			s, err := c.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(s, "cluster_state:ok") && strings.Contains(s, "cluster_known_nodes:3")
		})
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr, nodes[1].addr, nodes[2].addr}})
	t.Cleanup(func() { _ = cc.Close() })
	return nodes, cc
}

func movedErrors(t *testing.T, nodes []*server) int {
	total := 0
	for _, n := range nodes {
		s, err := n.client(t).Info(context.Background(), "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(line, "errorstat_MOVED:count=") {
				var c int
				fmt.Sscanf(strings.TrimPrefix(line, "errorstat_MOVED:count="), "%d", &c)
				total += c
			}
		}
	}
	return total
}

func TestCluster(t *testing.T) {
	nodes, cc := startCluster(t)
	ctx := ctxT(t, 60*time.Second)
	c := dlock.New(cc)
	// Warm go-redis' slot map, then count MOVED replies from here on.
	if err := cc.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return s.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	before := movedErrors(t, nodes)
	keys := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
	for _, k := range keys {
		h, err := c.Mutex(k).Lock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if _, err := c.Mutex(k).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("%s TryLock: %v", k, err)
		}
		if ok, err := h.Check(ctx); !ok || err != nil {
			t.Fatalf("%s Check: %v %v", k, ok, err)
		}
		if u, err := h.Unlock(ctx); u != dlock.Released || err != nil {
			t.Fatalf("%s Unlock: %v %v", k, u, err)
		}
	}
	if moved := movedErrors(t, nodes) - before; moved != 0 {
		t.Fatalf("%d MOVED replies: commands were not routed by the lock's key", moved)
	}
	// Sharded notices (SSUBSCRIBE on each key's master): a force-release on any shard
	// is told at once.
	for _, k := range keys {
		h, err := c.Mutex(k).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := cc.Do(ctx, "DLOCK.FORCERELEASE", k).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Done():
			if h.Reason() != dlock.LostForced {
				t.Fatalf("%s: %v", k, h.Err())
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: a force-release not told within 1 s", k)
		}
	}
	// A waiter on another shard's key is woken on release; BIND and durable grants use
	// the key's master.
	h, err := c.FairMutex("fair{x}", dlock.WithBind()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := c.FairMutex("fair{x}").Lock(ctx)
		if err == nil {
			_, err = h2.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Election: sharded notifications drive Observe.
	e1 := c.Election("lead", dlock.WithOwner("n1"))
	e2 := c.Election("lead", dlock.WithOwner("n2"))
	if err := e1.Campaign(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := e2.Observe(octx)
	if l := <-obs; l.Owner != "n1" || l.Value != "v1" {
		t.Fatalf("observed %+v", l)
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-obs:
		if l.Owner != "" {
			t.Fatalf("after resign: %+v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe did not see the resign")
	}
}
