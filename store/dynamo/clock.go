package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/byorelay/byorelay/internal/platform/ddb"
)

// ErrClockUncertain is the scheduled sweep's refusal: the store clock's
// offset from DynamoDB's is not known within ddb.MaxClockUncertainty (1 s)
// even after a fresh call, so no expiry is decided. Nothing was changed.
var ErrClockUncertain = errors.New("dynamo: sweep decided no expiry: this host cannot tell DynamoDB's time to within " +
	ddb.MaxClockUncertainty.String() + ", even after a fresh read (its round trips to DynamoDB take too long)")

// ClockProbeShards spreads the clock probe over partitions: every
// container reads one when it starts and whenever its offset grows
// uncertain, so one key would be read by the whole fleet's containers.
const ClockProbeShards = 256

// clockProbe is a key no item has, on a partition picked at random:
// reading it costs half a read unit and brings a fresh Date.
func clockProbe() map[string]types.AttributeValue {
	k := "CLOCK#probe#" + strconv.Itoa(rand.IntN(ClockProbeShards))
	return key(k, k)
}

// CalibrateClock reads the probe key so the store clock has a response to
// go by; a no-op unless the clock is a ddb.ServerClock. Call it once at start
// (lambdafn does): until the first response the clock reads the host, and
// what a cold replica stamps before then would carry the host's skew.
func (s *Store) CalibrateClock(ctx context.Context) error {
	if s.server == nil {
		return nil
	}
	if _, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: clockProbe()}); err != nil {
		return fmt.Errorf("dynamo: calibrate the store clock: %w", err)
	}
	return nil
}

// clockSettled reports whether the sweep may decide expiries: always with
// a clock other than a ddb.ServerClock; with one, once its offset is known
// within ddb.MaxClockUncertainty, calibrating first when it is not.
func (s *Store) clockSettled(ctx context.Context) (bool, error) {
	if s.server == nil || s.server.Settled() {
		return true, nil
	}
	if err := s.CalibrateClock(ctx); err != nil {
		return false, err
	}
	return s.server.Settled(), nil
}
