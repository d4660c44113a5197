package storetest

import "sync"

func (e *env) takeToken(bucket string, burst, refillMs int64) bool {
	e.Helper()
	ok, err := e.s.TakeToken(e.ctx, bucket, burst, refillMs)
	e.check(err)
	return ok
}

// takeAll takes until the bucket refuses, and says how many it gave.
func (e *env) takeAll(bucket string, burst, refillMs int64) int {
	e.Helper()
	n := 0
	for e.takeToken(bucket, burst, refillMs) {
		n++
		if n > int(burst)+1 {
			e.Fatalf("bucket %q gave more than its burst of %d", bucket, burst)
		}
	}
	return n
}

var throttleCases = []testCase{
	{"a bucket gives its burst, then one token per refill, and buckets are independent", func(e *env) {
		if n := e.takeAll("a", 3, 1_000); n != 3 {
			e.Fatalf("a fresh bucket gave %d tokens, want its burst of 3", n)
		}
		if !e.takeToken("b", 3, 1_000) {
			e.Fatal("another bucket was drained by the first")
		}
		e.advance(999)
		if e.takeToken("a", 3, 1_000) {
			e.Fatal("a token before a whole refill had passed")
		}
		e.advance(1)
		if n := e.takeAll("a", 3, 1_000); n != 1 {
			e.Fatalf("one refill later the bucket gave %d tokens, want 1", n)
		}
	}},
	{"a full bucket banks nothing: after a long quiet spell it gives its burst and no more", func(e *env) {
		e.takeAll("a", 2, 1_000)
		e.advance(3_600_000)
		if n := e.takeAll("a", 2, 1_000); n != 2 {
			e.Fatalf("after an hour the bucket gave %d tokens, want its burst of 2", n)
		}
	}},
	{"replicas spending at once never spend more than the bucket holds", func(e *env) {
		const burst = 5
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted := 0
		for range 4 * burst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := e.s.TakeToken(e.ctx, "shared", burst, 60_000)
				if err != nil {
					e.Error(err)
					return
				}
				if ok {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if granted > burst {
			e.Fatalf("%d tokens granted from a bucket of %d", granted, burst)
		}
		if granted == 0 {
			e.Fatal("no request got a token from a full bucket")
		}
	}},
}
