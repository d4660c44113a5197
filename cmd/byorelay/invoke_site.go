package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/localtest/lambdadev"
	"github.com/byorelay/byorelay/sitefn"
)

// What a self-contained site invoke creates: the site table, and the SSM
// parameter the deployed site functions read their keys from
// (SITE_KEYS_PARAMETER), held by moto.
const (
	invokeSiteTable         = "byorelay-site-invoke"
	invokeSiteKeysParameter = "/byorelay-invoke/site-keys"
)

// invokeSite is invoke for a function of the site stack
// (site-template.yaml): DynamoDB Local started here holding the site demo
// world (demo.World.SeedSite: the demo daemon paired as runner-demo, demo-job-1
// queued), the event prepared with the lease the demo daemon holds on
// demo-job-1, then run in-process or under the emulator. Under the
// emulator the real bootstrap reads the site's keys from SSM as it does
// deployed; moto holds the demo site's keys there.
func invokeSite(ctx context.Context, fn sitefn.Function, raw []byte, opts invokeOptions) ([]byte, error) {
	if os.Getenv("TABLE_NAME") != "" {
		return nil, errors.New("TABLE_NAME is set, but a site function runs against invoke's own DynamoDB Local with the site demo world (TABLE_NAME names a relay table); unset it")
	}
	root, err := demo.RepoRoot()
	if err != nil {
		return nil, err
	}
	world, err := demo.LoadDefault()
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(opts.logs, "starting DynamoDB Local (in memory)…")
	endpoint, stopDB, err := localtest.StartDynamoWithProgress(opts.logs)
	if err != nil {
		return nil, fmt.Errorf("DynamoDB Local: %w", err)
	}
	defer stopDB()
	db := dynamodb.NewFromConfig(localtest.AWSConfig(endpoint))
	st, err := lambdadev.OpenDemoSite(ctx, world, db, invokeSiteTable)
	if err != nil {
		return nil, err
	}
	lease, err := demo.SiteLease(ctx, st.Store)
	if err != nil {
		return nil, err
	}
	if lease == demo.NoLease && strings.Contains(string(raw), demo.PlaceholderLeaseID) {
		fmt.Fprintf(opts.logs, "note: %s is queued, not claimed, in this fresh table: {{leaseId}} is %q, a lease nobody holds\n", demo.JobID, demo.NoLease)
	}
	prepare := func() ([]byte, error) { return lambdadev.PrepareSiteEvent(fn, raw, world, time.Now(), lease) }
	if opts.inProcess {
		event, err := prepare()
		if err != nil {
			return nil, err
		}
		return lambdadev.InvokeSiteInProcess(ctx, st, fn, event)
	}

	fmt.Fprintln(opts.logs, "starting moto (its SSM holds the demo site's keys, as the deployed stack's parameter does)…")
	motoEndpoint, stopMoto, err := localtest.StartMotoWithProgress(opts.logs)
	if err != nil {
		return nil, fmt.Errorf("moto: %w", err)
	}
	defer stopMoto()
	if err := putSiteKeys(ctx, motoEndpoint, world); err != nil {
		return nil, err
	}
	env := append([]string{
		"TABLE_NAME=" + invokeSiteTable,
		"SITE_KEYS_PARAMETER=" + invokeSiteKeysParameter,
		"VERIFICATION_URL=" + demo.SiteVerificationURL,
		"AWS_ENDPOINT_URL_SSM=" + motoEndpoint,
	}, localCredentials(endpoint)...)
	return emulate(ctx, root, fn.Name, env, prepare, opts)
}

// putSiteKeys writes the demo site's keys (StoredKeys JSON, what
// @byollm/server's keygen writes) as the SecureString the site functions
// read.
func putSiteKeys(ctx context.Context, motoEndpoint string, w *demo.World) error {
	raw, err := w.SiteKeysJSON()
	if err != nil {
		return err
	}
	_, err = ssm.NewFromConfig(localtest.AWSConfig(motoEndpoint)).PutParameter(ctx, &ssm.PutParameterInput{
		Name: aws.String(invokeSiteKeysParameter), Value: aws.String(string(raw)),
		Type: ssmtypes.ParameterTypeSecureString, Overwrite: aws.Bool(true),
	})
	if err != nil {
		return fmt.Errorf("put the demo site's keys in moto's SSM: %w", err)
	}
	return nil
}
