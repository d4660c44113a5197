package siterestart

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	site "github.com/byorelay/byorelay/client/site"
	"github.com/byorelay/byorelay/internal/siteserver"
	sitedynamo "github.com/byorelay/byorelay/internal/sitestore/dynamo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/peers"
	"github.com/byorelay/byorelay/protocol"
)

// The site process's environment.
const (
	envRole  = "BYORELAY_SITERESTART_ROLE" // "site"
	envSeed  = "BYORELAY_SITERESTART_SEED"
	envRelay = "BYORELAY_SITERESTART_RELAY"
	envDDB   = "BYORELAY_SITERESTART_DDB"
	envTable = "BYORELAY_SITERESTART_TABLE"
	envJobs  = "BYORELAY_SITERESTART_JOBS"
	envLog   = "BYORELAY_SITERESTART_LOG"
	// envStreamOut: the site also publishes streamJob, a streaming job,
	// reads its live stream and writes the text, once read to the end,
	// to this file.
	envStreamOut = "BYORELAY_SITERESTART_STREAM_OUT"
	streamJob    = "stream-000"
	siteID       = "site-restart"
	jobOwner     = "alice"
	pumpEvery    = 150 * time.Millisecond
	// enqueueGap spaces the jobs out so that, at any moment, some are
	// waiting for a seal, some running and some finished.
	enqueueGap = 120 * time.Millisecond
	jobTTL     = 2 * time.Minute
)

func jobID(i int) string { return fmt.Sprintf("job-%03d", i) }

func promptOf(id string) string { return "restart test " + id + ": say something" }

// runSite is one incarnation of the site app: open the store, publish the
// jobs the store does not hold yet, and pump until killed. It never exits
// on its own; everything it knows is in the store.
func runSite() error {
	keys, err := peers.SiteKeys(os.Getenv(envSeed))
	if err != nil {
		return err
	}
	jobs, err := strconv.Atoi(os.Getenv(envJobs))
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(os.Getenv(envLog), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	st, err := sitedynamo.New(sitedynamo.Config{
		DB:    dynamodb.NewFromConfig(localtest.AWSConfig(os.Getenv(envDDB))),
		Table: os.Getenv(envTable),
	})
	if err != nil {
		return err
	}
	s, err := siteserver.New(siteserver.Config{Store: st, Keys: keys,
		Cloud: &siteserver.CloudLane{RelayURL: os.Getenv(envRelay), SiteID: siteID}})
	if err != nil {
		return err
	}
	ctx := context.Background()
	fmt.Fprintf(logf, "start %d\n", os.Getpid())
	runErr := make(chan error, 1)
	go func() {
		runErr <- s.Run(ctx, pumpEvery, func(rep site.Report) {
			// One line per ending this process made: a job ended twice
			// would show as two lines, whichever incarnations wrote them.
			for _, e := range rep.Ended {
				fmt.Fprintf(logf, "end %s %s\n", e.JobID, e.Fate)
			}
		})
	}()
	if out := os.Getenv(envStreamOut); out != "" {
		if err := publishAndRead(ctx, s, logf, out); err != nil {
			return err
		}
	}
	for i := range jobs {
		id := jobID(i)
		if _, found, err := s.Job(ctx, id); err != nil {
			return err
		} else if found {
			continue
		}
		_, err := s.Enqueue(ctx, siteserver.EnqueueInput{ID: id, Kind: protocol.KindGenerate,
			Payload: []byte(fmt.Sprintf(`{"prompt":%q}`, promptOf(id))), Owner: jobOwner, TTLMs: jobTTL.Milliseconds()})
		if err != nil {
			return fmt.Errorf("enqueue %s: %w", id, err)
		}
		select {
		case err := <-runErr:
			return fmt.Errorf("pumping stopped: %w", err)
		case <-time.After(enqueueGap):
		}
	}
	err = <-runErr
	return errors.Join(errors.New("pumping stopped"), err)
}

// streamPrompt is the streaming job's prompt: long enough, at the daemon's
// drip, to stream for several seconds.
func streamPrompt() string {
	words := make([]string, 80)
	for i := range words {
		words[i] = fmt.Sprintf("s%02d", i)
	}
	return strings.Join(words, " ")
}

// publishAndRead publishes streamJob unless the store holds it, and reads
// its stream from a goroutine: "delta <pid> <bytes so far>" per delta, and
// once it is read to its seal the text goes to out and "streamed <pid>
// <bytes>" to the log. An incarnation started after a kill reads it as any
// process would: from the grant and the checkpoint in the store.
func publishAndRead(ctx context.Context, s *siteserver.Server, logf *os.File, out string) error {
	if _, found, err := s.Job(ctx, streamJob); err != nil {
		return err
	} else if !found {
		if _, err := s.Enqueue(ctx, siteserver.EnqueueInput{ID: streamJob, Kind: protocol.KindGenerate,
			Payload: []byte(fmt.Sprintf(`{"prompt":%q}`, streamPrompt())), Owner: jobOwner, Streaming: true,
			TTLMs: jobTTL.Milliseconds()}); err != nil {
			return fmt.Errorf("enqueue %s: %w", streamJob, err)
		}
	}
	go func() {
		pid := os.Getpid()
		for {
			var text strings.Builder
			var last error
			for delta, err := range s.Stream(ctx, streamJob) {
				text.WriteString(delta)
				last = err
				if delta != "" {
					fmt.Fprintf(logf, "delta %d %d\n", pid, text.Len())
				}
			}
			if last == nil {
				tmp := out + ".tmp"
				if os.WriteFile(tmp, []byte(text.String()), 0o600) == nil && os.Rename(tmp, out) == nil {
					fmt.Fprintf(logf, "streamed %d %d\n", pid, text.Len())
				}
				return
			}
			// Not sealed to the device yet (absent), or ended short:
			// read again, as a page would.
			fmt.Fprintf(logf, "stream %d %v\n", pid, last)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return nil
}
