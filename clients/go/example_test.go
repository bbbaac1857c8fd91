package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	dlock "github.com/dlock/dlock/clients/go"
)

// Compiled, not run (no server at localhost:6379 in the tests).

func ExampleMutex_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locks := dlock.New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hold, err := locks.Mutex("orders").Lock(ctx)
	if errors.Is(err, dlock.ErrTimeout) {
		log.Println("busy for 5 s")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer hold.Unlock(context.Background())
	// Writes fenced by the hold's token: refused once the hold is over.
	if _, err := hold.Fenced(ctx, "SET", "{orders}:last", "42"); errors.Is(err, dlock.ErrFenced) {
		log.Println("lost the lock before writing")
	}
}

func ExampleSemaphore() {
	locks := dlock.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	sem := locks.Semaphore("api-quota", 10)
	ctx := context.Background()
	if err := sem.Acquire(ctx, 3); err != nil {
		log.Fatal(err)
	}
	defer sem.Release(3)
	fmt.Println("holding", sem.Held(), "of 10 permits")
}

func ExampleElection() {
	locks := dlock.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	e := locks.Election("billing-leader", dlock.WithBind())
	ctx := context.Background()
	if err := e.Campaign(ctx, "10.0.0.7:8080"); err != nil {
		log.Fatal(err)
	}
	select {
	case <-e.Done():
		log.Println("no longer leader")
	case <-time.After(time.Minute):
		_ = e.Resign(ctx)
	}
}

func ExampleRunOnce() {
	locks := dlock.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	out, err := dlock.RunOnce(context.Background(), locks, "nightly-report",
		dlock.RunOnceOptions{AtMostFor: 10 * time.Minute, AtLeastFor: 30 * time.Second},
		func(ctx context.Context, run *dlock.Hold) error {
			fmt.Println("running with token", run.Token())
			return nil
		})
	fmt.Println(out, err)
}
