package sitepump

import (
	"context"
	"sync"
	"time"

	"github.com/byorelay/byorelay/internal/sitepump"
)

// InProcess runs pump invocations as goroutines of this process: the
// pump's Starter and Waker for `byorelay-local site --lane cloud`, where one
// process holds the whole local stack. Handle is the pump function's
// handler, set once the stack is open; Returned hears each invocation's
// end. Unlike Emulator, an invocation here cannot be killed alone.
type InProcess struct {
	Handle   func(ctx context.Context, ev sitepump.Event) (sitepump.Report, error)
	Returned func(ev sitepump.Event, rep sitepump.Report, err error)
	mu       sync.Mutex
	timers   []*time.Timer
}

// Start runs one invocation with ev on its own goroutine.
func (l *InProcess) Start(_ context.Context, ev sitepump.Event) error {
	go func() {
		rep, err := l.Handle(context.Background(), ev)
		if l.Returned != nil {
			l.Returned(ev, rep, err)
		}
	}()
	return nil
}

// Wake starts an invocation with TriggerWakeup at at.
func (l *InProcess) Wake(ctx context.Context, at time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timers = append(l.timers, time.AfterFunc(time.Until(at), func() {
		_ = l.Start(ctx, sitepump.Event{Trigger: sitepump.TriggerWakeup})
	}))
	return nil
}
