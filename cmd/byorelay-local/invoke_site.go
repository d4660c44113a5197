package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/demo"
	"github.com/byorelay/byorelay/localtest/lambdadev"
)

// What a self-contained site invoke creates: the site table, and the SSM
// parameter the deployed site functions read their keys from
// (SITE_KEYS_PARAMETER), held by moto.
const (
	invokeSiteTable         = "byorelay-site-invoke"
	invokeSiteKeysParameter = "/byorelay-invoke/site-keys"
)

// invokeSite is invoke for a function of the site stack
// (site-template.yaml): against the site demo world (demo.World.SeedSite:
// the demo daemon paired as runner-demo, demo-job-1 queued) in DynamoDB
// Local started here, or in a running `byorelay-local site --demo`
// (siteTarget), the event prepared with the lease the demo daemon holds on
// demo-job-1, then run in-process or under the emulator. Under the
// emulator the real bootstrap reads the site's keys from SSM as it does
// deployed; moto holds the demo site's keys there.
func invokeSite(ctx context.Context, fn sitefn.Function, raw []byte, opts invokeOptions) ([]byte, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	world, err := loadDemoWorld()
	if err != nil {
		return nil, err
	}
	table, endpoint, st, stop, err := siteTarget(ctx, world, opts)
	if err != nil {
		return nil, err
	}
	defer stop()
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
		"TABLE_NAME=" + table,
		"SITE_KEYS_PARAMETER=" + invokeSiteKeysParameter,
		"VERIFICATION_URL=" + demo.SiteVerificationURL,
		"AWS_ENDPOINT_URL_SSM=" + motoEndpoint,
	}, localCredentials(endpoint)...)
	if fn.Kind == sitefn.KindPump {
		env = append(env, pumpInvokeEnv(os.Getenv)...)
	}
	return emulate(ctx, root, fn.Name, env, prepare, opts)
}

// siteTarget is the site table a site invoke acts on. With TABLE_NAME
// unset: DynamoDB Local started here, the site demo world seeded in it.
// With TABLE_NAME set: that table on the loopback DynamoDB
// AWS_ENDPOINT_URL_DYNAMODB names, as it is, under the local stack's
// credentials (DynamoDB Local keeps tables per access key); it must hold
// the site demo world, as `byorelay-local site --demo` seeds it.
func siteTarget(ctx context.Context, world *demo.World, opts invokeOptions) (table, endpoint string, st *sitefn.Stack, stop func(), err error) {
	table = os.Getenv("TABLE_NAME")
	if table == "" {
		fmt.Fprintln(opts.logs, "starting DynamoDB Local (in memory)…")
		endpoint, stop, err = localtest.StartDynamoWithProgress(opts.logs)
		if err != nil {
			return "", "", nil, nil, fmt.Errorf("DynamoDB Local: %w", err)
		}
		st, err = lambdadev.OpenDemoSite(ctx, world, dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), invokeSiteTable)
		if err != nil {
			stop()
			return "", "", nil, nil, err
		}
		return invokeSiteTable, endpoint, st, stop, nil
	}
	endpoint = os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	if !loopbackURL(endpoint) {
		return "", "", nil, nil, fmt.Errorf("TABLE_NAME=%s: a site function is invoked against a local site stack only (`make site SITE_FLAGS=--demo` prints the AWS_ENDPOINT_URL_DYNAMODB to use), or against invoke's own with TABLE_NAME unset", table)
	}
	st, err = sitefn.Open(sitefn.Env{TableName: table, VerificationURL: demo.SiteVerificationURL},
		sitefn.Options{DB: dynamodb.NewFromConfig(localtest.AWSConfig(endpoint)), Keys: world.Site})
	if err != nil {
		return "", "", nil, nil, err
	}
	// A relay table, or a site stack started without --demo, has no demo
	// daemon: every signed sample would answer 401.
	_, found, err := st.Store.Runner(ctx, demo.RunnerID)
	if err != nil || !found {
		why := demo.RunnerID + " is not paired there"
		if err != nil {
			why = err.Error()
		}
		return "", "", nil, nil, fmt.Errorf("TABLE_NAME=%s on %s holds no site demo world (%s): start the site stack with `make site SITE_FLAGS=--demo`, or unset TABLE_NAME for invoke's own", table, endpoint, why)
	}
	return table, endpoint, st, func() {}, nil
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

// pumpInvokeEnv is the cloud-lane environment `make invoke FN=sitepump`
// runs the pump in: the relay and site id from RELAY_URL and RELAY_SITE_ID
// (default `make run`'s relay and the demo site's id). Its hand-over and
// wake-up are not wired to anything here: one invocation is what runs.
func pumpInvokeEnv(getenv func(string) string) []string {
	relay, siteID := getenv("RELAY_URL"), getenv("RELAY_SITE_ID")
	if relay == "" {
		relay = "http://127.0.0.1:8787"
	}
	if siteID == "" {
		siteID = "demo-site"
	}
	return []string{"RELAY_URL=" + relay, "RELAY_SITE_ID=" + siteID, "PUMP_FUNCTION=sitepump",
		"PUMP_WAKEUP_GROUP=local", "PUMP_WAKEUP_ROLE_ARN=arn:aws:iam::000000000000:role/local"}
}
