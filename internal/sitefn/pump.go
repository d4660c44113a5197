package sitefn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/byorelay/byorelay/internal/platform/clock"
	"github.com/byorelay/byorelay/internal/platform/container"
	"github.com/byorelay/byorelay/internal/platform/emf"
	"github.com/byorelay/byorelay/internal/platform/wakeup"
	"github.com/byorelay/byorelay/internal/sitepump"
)

// Pump metrics, under MetricsNamespace, dimensioned by function.
const (
	// MetricPumpLag is the age of the oldest job waiting to be published,
	// written each pump cycle; site-template.yaml alarms on it.
	MetricPumpLag = "PumpLagMs"
	// MetricLateSeals counts the seals the relay refused because the
	// claim's awaiting window had lapsed (the relay offers the job again).
	MetricLateSeals = "LateSeals"
)

// writePumpEMF writes one EMF record of a pump cycle.
func writePumpEMF(out io.Writer, c sitepump.Cycle, now time.Time) {
	writeFunctionEMF(out, Pump, now,
		emf.Metric{Name: MetricPumpLag, Unit: "Milliseconds", Value: float64(c.LagMs)},
		emf.Metric{Name: MetricLateSeals, Value: float64(c.Late)})
}

// lambdaStarter starts the pump by an asynchronous Lambda invoke of the
// function named in PUMP_FUNCTION. The client is built by the first start.
type lambdaStarter struct {
	api      func() *lambda.Client
	function string
}

func newLambdaStarter(cfg aws.Config, endpoint *string, function string) *lambdaStarter {
	return &lambdaStarter{function: function, api: sync.OnceValue(func() *lambda.Client {
		return lambda.NewFromConfig(cfg, func(o *lambda.Options) {
			if endpoint != nil {
				o.BaseEndpoint = endpoint
			}
		})
	})}
}

func (s *lambdaStarter) Start(ctx context.Context, ev sitepump.Event) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = s.api().Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(s.function),
		InvocationType: lambdatypes.InvocationTypeEvent, Payload: payload})
	if err != nil {
		return fmt.Errorf("sitefn: start %s: %w", s.function, err)
	}
	return nil
}

// pumpWakeupInput is the pump's event when a wake-up fires.
const pumpWakeupInput = `{"trigger":"` + sitepump.TriggerWakeup + `"}`

// newPumpWaker arms the pump's one-time wake-ups in PUMP_WAKEUP_GROUP,
// each invoking the pump: one replaces a pump that died with jobs in
// flight.
func newPumpWaker(cfg aws.Config, endpoint *string, group, target, role string, clk clock.Clock) *wakeup.Waker {
	return wakeup.New(cfg, wakeup.Config{
		Group: group, TargetARN: target, RoleARN: role, Input: pumpWakeupInput,
		Prefix: "pump-", Description: "byorelay site pump wake-up: replaces a pump that died with jobs in flight",
		Endpoint: aws.ToString(endpoint), Clock: clk,
	})
}

// PumpHandler is the pump function's handler (sitepump.Pump.Handle), its
// figures written as EMF on stdout.
func (st *Stack) PumpHandler() (func(ctx context.Context, ev sitepump.Event) (sitepump.Report, error), error) {
	if st.pump == nil {
		return nil, errors.New("sitefn: this stack is not on the cloud lane (RELAY_URL and RELAY_SITE_ID are unset): it has no pump")
	}
	return st.pump.Handle, nil
}

// startPump starts a pump after the app stored a job; a start that fails
// is logged and left to the wake-up or the next job.
func (st *Stack) startPump(ctx context.Context) {
	if st.starter == nil {
		return
	}
	if err := st.starter.Start(ctx, sitepump.Event{Trigger: sitepump.TriggerEnqueue}); err != nil {
		st.log.WarnContext(ctx, "pump not started", "problem", err.Error())
	}
}

// openPump wires the cloud lane's pump and its starter: the triggers from
// o, or from the environment (PUMP_FUNCTION, PUMP_WAKEUP_*) through cfg.
func (st *Stack) openPump(env Env, o Options, cfg aws.Config) error {
	starter, waker := o.Starter, o.Waker
	if starter == nil || waker == nil {
		if env.PumpFunction == "" || env.PumpWakeupGroup == "" || env.PumpWakeupRoleARN == "" {
			return errors.New("sitefn: the cloud lane needs PUMP_FUNCTION, PUMP_WAKEUP_GROUP and PUMP_WAKEUP_ROLE_ARN (the pump's triggers)")
		}
	}
	if starter == nil {
		starter = newLambdaStarter(cfg, container.EndpointFor(os.Getenv, "lambda"), env.PumpFunction)
	}
	if waker == nil {
		waker = newPumpWaker(cfg, container.EndpointFor(os.Getenv, "scheduler"), env.PumpWakeupGroup, env.PumpFunction, env.PumpWakeupRoleARN, o.Clock)
	}
	pump, err := sitepump.New(sitepump.Config{
		Store:   st.Store,
		Server:  func(ctx context.Context) (sitepump.Runner, error) { return st.Server(ctx) },
		Starter: starter, Waker: waker,
		Every:     time.Duration(env.PumpEveryMs) * time.Millisecond,
		LeaseTTL:  time.Duration(env.PumpLeaseMs) * time.Millisecond,
		Budget:    time.Duration(env.PumpBudgetMs) * time.Millisecond,
		WakeAfter: time.Duration(env.PumpWakeAfterMs) * time.Millisecond,
		Logger:    st.log,
		OnCycle:   func(c sitepump.Cycle) { writePumpEMF(os.Stdout, c, time.Now()) },
	})
	if err != nil {
		return err
	}
	st.starter, st.pump = starter, pump
	return nil
}
