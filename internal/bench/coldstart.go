package bench

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/sitefn"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/lambdadev"
	"github.com/byorelay/byorelay/protocol"
	"github.com/byorelay/byorelay/store/dynamo"
)

// ColdStart is every function's deployed size and its init duration under
// the Lambda runtime interface emulator, beside a hello-world function
// built the same way in the same run: for each function, Runs pairs of
// cold starts, hello-world and the function back to back (which goes first
// alternates), so a change in the machine's load lands on both halves of a
// pair; the verdict is the median of the per-pair ratios.
type ColdStart struct {
	// Note says what was measured on which architecture.
	Note      string         `json:"note"`
	Runs      int            `json:"pairsPerFunction"`
	Functions []FunctionCost `json:"functions"`
	// Error is why the measurement did not complete (a function that does
	// not build); the rest of the report stands.
	Error string `json:"error,omitempty"`
}

// FunctionCost is one function's size and start-up.
type FunctionCost struct {
	Name string `json:"name"`
	// FirstReads says what the function reads over the network on its
	// first request, before it answers, as deployed ("" for nothing beyond
	// DynamoDB's clock): the site functions read their keys from SSM; pair,
	// claim and the catch-all the grant key. No function calls anything
	// during init; that round trip (to moto here) is in FirstInvokeMs.
	FirstReads string `json:"firstReads,omitempty"`
	// Arm64Bytes is the bootstrap as deployed (linux/arm64, static,
	// lambda.norpc, trimmed, stripped); Arm64ZipBytes the same zipped
	// (deflate), which is what Lambda stores and loads.
	Arm64Bytes    int64 `json:"arm64Bytes"`
	Arm64ZipBytes int64 `json:"arm64ZipBytes"`
	// InitMs are the init phase of each cold start of the host-architecture
	// build, from the runtime's INIT START to the function's first request
	// for work (the emulator's "INIT REPORT(durationMs: …)", the figure
	// Lambda reports as Init Duration and in platform.initReport), and
	// InitMedianMs their median. ReportInitMs are the emulator's own REPORT
	// line "Init Duration", which it measures over a shorter span; kept for
	// comparison.
	InitMs       []float64 `json:"initMs"`
	InitMedianMs float64   `json:"initMedianMs"`
	ReportInitMs []float64 `json:"reportInitMs"`
	// FirstInvokeMs are the invoke after each init (the emulator's INVOKE
	// RTDONE duration: the event handed over to the answer written), and
	// FirstInvokeMedianMs their median: work moved out of init onto the
	// first request (the store clock's calibrating read) shows here.
	FirstInvokeMs       []float64 `json:"firstInvokeMs"`
	FirstInvokeMedianMs float64   `json:"firstInvokeMedianMs"`
	// HelloInitMs are the hello-world cold starts paired with InitMs, and
	// InitRatios each pair's function / hello-world; InitRatioMedian their
	// median (the hello-world row has none).
	HelloInitMs     []float64 `json:"helloInitMs,omitempty"`
	InitRatios      []float64 `json:"initRatios,omitempty"`
	InitRatioMedian float64   `json:"initRatioMedian,omitempty"`
}

// helloName is the baseline's row.
const helloName = "hello-world (baseline)"

// measureColdStart builds every function twice (arm64 for size, the host's
// architecture to run under the emulator, since an arm64 binary does not
// run here) and starts each under the emulator runs times, each paired
// with a hello-world start, one cold start per emulator. Every function of
// both stacks (the relay's, lambdafn.Functions, and the site's,
// sitefn.Functions) runs with the environment its template gives it, its
// DynamoDB on ddbEndpoint and every other service (SSM, S3, SNS,
// Scheduler) on a moto server started here.
func measureColdStart(ctx context.Context, repoRoot, ddbEndpoint string, runs int, progress io.Writer) (*ColdStart, error) {
	dir, err := os.MkdirTemp("", "byorelay-bench-cold-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rie, err := lambdadev.InstallRIE(ctx, filepath.Join(repoRoot, ".cache", "bin"))
	if err != nil {
		return nil, err
	}
	moto, stopMoto, err := localtest.StartMotoWithProgress(progress)
	if err != nil {
		return nil, err
	}
	defer stopMoto()
	envOf, err := coldStartEnv(ctx, ddbEndpoint, moto)
	if err != nil {
		return nil, err
	}
	cs := &ColdStart{
		Runs: runs,
		Note: fmt.Sprintf("sizes: linux/arm64 builds as deployed; init: linux/%s builds of the same code under the runtime interface emulator on this machine (an arm64 binary does not run on %s), each function with its template's environment (DynamoDB Local, moto for SSM, S3, SNS and Scheduler)",
			runtime.GOARCH, runtime.GOARCH),
	}
	names := []string{helloName}
	for _, f := range lambdafn.Functions() {
		names = append(names, f.Name)
	}
	for _, f := range sitefn.Functions() {
		names = append(names, f.Name)
	}
	arm, err := buildAll(ctx, repoRoot, filepath.Join(dir, "arm64"), "arm64")
	if err != nil {
		return nil, err
	}
	boot, err := buildAll(ctx, repoRoot, filepath.Join(dir, runtime.GOARCH), runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	for name := range arm {
		if !slices.Contains(names, name) {
			return nil, fmt.Errorf("functions/%s is in neither stack's registry", name)
		}
	}
	for _, name := range names {
		fc := FunctionCost{Name: name}
		if fc.Arm64Bytes, fc.Arm64ZipBytes, err = sizes(arm[name]); err != nil {
			return nil, err
		}
		_, fc.FirstReads = envOf(name)
		cs.Functions = append(cs.Functions, fc)
	}
	hello := &cs.Functions[0]
	cold := func(name string) (phase, report, invoke float64, err error) {
		env, _ := envOf(name)
		// On a loaded machine the emulator now and then starts the
		// bootstrap before its runtime API listens ("failed to get the next
		// invoke: … connection refused"): that start measured nothing, so
		// it is made again in a fresh emulator, a few times at most.
		for range 3 {
			if phase, report, invoke, err = initDuration(ctx, rie, boot[name], env, eventFor(name)); err == nil {
				return phase, report, invoke, nil
			}
		}
		return 0, 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	started := time.Now()
	total := (len(names) - 1) * runs
	done := 0
	for i := 1; i < len(names); i++ {
		fc := &cs.Functions[i]
		for r := range runs {
			var fp, fr, fi, hp, hr, hi float64
			var err error
			// Alternate who goes first: a start warms the page cache and the
			// scheduler for the one after it.
			if r%2 == 0 {
				if hp, hr, hi, err = cold(helloName); err == nil {
					fp, fr, fi, err = cold(fc.Name)
				}
			} else {
				if fp, fr, fi, err = cold(fc.Name); err == nil {
					hp, hr, hi, err = cold(helloName)
				}
			}
			if err != nil {
				return nil, err
			}
			fc.InitMs, fc.ReportInitMs = append(fc.InitMs, fp), append(fc.ReportInitMs, fr)
			fc.FirstInvokeMs, hello.FirstInvokeMs = append(fc.FirstInvokeMs, fi), append(hello.FirstInvokeMs, hi)
			fc.HelloInitMs = append(fc.HelloInitMs, hp)
			fc.InitRatios = append(fc.InitRatios, ratio(fp, hp))
			hello.InitMs, hello.ReportInitMs = append(hello.InitMs, hp), append(hello.ReportInitMs, hr)
			done++
			if progress != nil && done%10 == 0 {
				left := time.Duration(float64(time.Since(started)) / float64(done) * float64(total-done)).Round(time.Second)
				fmt.Fprintf(progress, "  cold start: %d/%d pairs, %s ×%.2f so far, about %s left\n", done, total, fc.Name, median(fc.InitRatios), left)
			}
		}
		fc.InitMedianMs = median(fc.InitMs)
		fc.InitRatioMedian = median(fc.InitRatios)
		fc.FirstInvokeMedianMs = median(fc.FirstInvokeMs)
	}
	hello.InitMedianMs = median(hello.InitMs)
	hello.FirstInvokeMedianMs = median(hello.FirstInvokeMs)
	return cs, nil
}

// buildAll makes every function's bootstrap exactly as it deploys, and the
// baseline with the same flags lambdadev.BuildAll uses.
func buildAll(ctx context.Context, repoRoot, outDir, goarch string) (map[string]string, error) {
	paths, err := lambdadev.BuildAll(ctx, repoRoot, outDir, goarch)
	if err != nil {
		return nil, err
	}
	if paths[helloName], err = buildHello(ctx, repoRoot, outDir, goarch); err != nil {
		return nil, err
	}
	return paths, nil
}

func buildHello(ctx context.Context, repoRoot, outDir, goarch string) (string, error) {
	out := filepath.Join(outDir, "hello", "bootstrap")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, "./internal/bench/hello")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build hello: %w\n%s", err, b)
	}
	return out, nil
}

// sizes is the binary's size and the size of a deployment zip holding it
// as bootstrap.
func sizes(path string) (raw, zipped int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate}
	h.SetMode(0o755)
	f, err := zw.CreateHeader(h)
	if err != nil {
		return 0, 0, err
	}
	if _, err := f.Write(b); err != nil {
		return 0, 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, 0, err
	}
	return int64(len(b)), int64(buf.Len()), nil
}

// The SSM parameters the cold starts read, in moto.
const (
	coldTable         = "bench-coldstart"
	coldSiteKeysParam = "/bench-coldstart/site-keys"
	coldGrantKeyParam = "/bench-coldstart/grant-key"
)

// coldStartEnv stores the parameters the functions read (a fresh
// site key file, a fresh grant seed, both SecureStrings) and returns each
// function's environment: what template.yaml's Globals and the function's
// own Environment set (relay), or site-template.yaml's (site), with every
// endpoint local. Only the values differ from a deployment. The table,
// bucket, topic and schedule group need not exist: nothing is called on
// them before the function asks for work, and the invoke after it is
// refused or fails after its key read, which is fine (the answer is not
// what is measured).
func coldStartEnv(ctx context.Context, ddb, moto string) (func(name string) (env []string, firstReads string), error) {
	keys, err := protocol.GenerateKeys()
	if err != nil {
		return nil, err
	}
	siteKeys, err := json.Marshal(keys.Stored(time.Now().UnixMilli()))
	if err != nil {
		return nil, err
	}
	seed := make([]byte, 32)
	if _, err := rand.Read(seed); err != nil {
		return nil, err
	}
	client := ssm.NewFromConfig(localtest.AWSConfig(moto))
	for name, value := range map[string]string{coldSiteKeysParam: string(siteKeys), coldGrantKeyParam: base64.StdEncoding.EncodeToString(seed)} {
		if _, err := client.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(value),
			Type: ssmtypes.ParameterTypeSecureString, Overwrite: aws.Bool(true)}); err != nil {
			return nil, fmt.Errorf("store %s in moto: %w", name, err)
		}
	}
	common := []string{
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
		"AWS_ENDPOINT_URL_DYNAMODB=" + ddb, "AWS_ENDPOINT_URL_SSM=" + moto, "AWS_ENDPOINT_URL_S3=" + moto,
		"AWS_ENDPOINT_URL_SNS=" + moto, "AWS_ENDPOINT_URL_SCHEDULER=" + moto,
		"TABLE_NAME=" + coldTable, "VERIFICATION_URL=https://relay.example/approve", "LEASE_MS=60000",
	}
	relay := append(slices.Clone(common),
		"BUCKET_NAME="+coldTable+"-envelopes", "DEBUG=0", "METRICS_NAMESPACE=byorelay",
		"DUE_SHARDS="+strconv.Itoa(dynamo.DefaultDueShards),
		"SITE_COPIES="+strconv.Itoa(controlplane.DefaultSiteCopies),
		"UNSEALED_SHARDS="+strconv.Itoa(dynamo.DefaultUnsealedShards),
		"FINISHED_SHARDS="+strconv.Itoa(dynamo.DefaultFinishedShards),
		"CHURN_TOPIC_ARN=arn:aws:sns:us-east-1:123456789012:"+coldTable+"-churn")
	wakeups := []string{"WAKEUP_GROUP=" + coldTable + "-wakeups",
		"SWEEPER_ARN=arn:aws:lambda:us-east-1:123456789012:function:" + coldTable + "-sweeper",
		"WAKEUP_ROLE_ARN=arn:aws:iam::123456789012:role/" + coldTable + "-wakeup"}
	// The seed option, as the template sets it when GrantKmsKeyId is empty.
	grantKey := []string{"GRANT_KEY_PARAMETER=" + coldGrantKeyParam, "GRANT_KMS_KEY_ID="}
	site := append(slices.Clone(common), "SITE_KEYS_PARAMETER="+coldSiteKeysParam, "PAIRING_TTL_MS=600000",
		"BUCKET_NAME="+coldTable+"-site-envelopes", "ANSWER_RETENTION_DAYS=7",
		"PUMP_FUNCTION=arn:aws:lambda:us-east-1:123456789012:function:"+coldTable+"-sitepump",
		"PUMP_WAKEUP_GROUP="+coldTable+"-pump", "PUMP_WAKEUP_ROLE_ARN=arn:aws:iam::123456789012:role/"+coldTable+"-pump-wakeup",
		"PUMP_EVERY_MS=2000", "PUMP_BUDGET_MS=600000")
	// The lanes, as site-template.yaml's RelayUrl and RelaySiteId set
	// them: the pump is deployed on the cloud lane only, the rest on either.
	direct := []string{"RELAY_URL=", "RELAY_SITE_ID="}
	cloud := []string{"RELAY_URL=https://relay.example", "RELAY_SITE_ID=site-cold"}
	return func(name string) ([]string, string) {
		fn := "AWS_LAMBDA_FUNCTION_NAME=" + coldTable + "-" + name
		switch {
		case name == helloName:
			return []string{fn}, ""
		case name == lambdafn.Pair:
			return append(append(slices.Clone(relay), fn), grantKey...), "reads the grant key from SSM on its first request"
		case name == lambdafn.Claim || name == lambdafn.CatchAll:
			return append(append(append(slices.Clone(relay), wakeups...), fn), grantKey...), "reads the grant key from SSM on its first request"
		case strings.HasPrefix(name, "site"):
			// The sweeper is set SITE_KEYS_PARAMETER too (the template's
			// Globals) but never reads it.
			lane := direct
			if name == sitefn.Pump {
				lane = cloud
			}
			env := append(append(slices.Clone(site), lane...), fn)
			if f, err := sitefn.Lookup(name); err == nil && f.ReadsKeys() {
				return env, "reads the site keys from SSM on its first request"
			}
			return env, ""
		}
		return append(slices.Clone(relay), fn), ""
	}, nil
}

// eventFor is an invoke that needs nothing to exist: an HTTP request the
// relay refuses before any lookup, or a sweep of an absent table. Its
// duration is the first invoke's (the key read, the clock's calibration);
// its answer is not measured.
func eventFor(name string) []byte {
	switch name {
	case helloName, lambdafn.Sweeper, sitefn.Sweeper:
		return []byte(`{}`)
	}
	return []byte(`{"version":"2.0","routeKey":"$default","rawPath":"/byollm/claim","headers":{},"requestContext":{"http":{"method":"POST","path":"/byollm/claim"}},"isBase64Encoded":false}`)
}

// The emulator's two init figures: rapid's init phase report, and the
// REPORT line written as Lambda writes it to CloudWatch Logs; and rapid's
// report of the invoke after it.
var (
	initPhasePattern  = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	initReportPattern = regexp.MustCompile(`Init Duration: ([0-9.]+) ms`)
	invokePattern     = regexp.MustCompile(`INVOKE RTDONE\(status: [^,]*, produced bytes: [0-9]+, duration: ([0-9.]+)ms\)`)
)

// initDuration starts one emulator, invokes once (the init runs on the
// first invoke) and reads both init figures and the invoke's duration.
func initDuration(ctx context.Context, rie, bootstrap string, env []string, event []byte) (phase, report, invoke float64, err error) {
	logs := &syncBuffer{}
	em, err := lambdadev.StartEmulator(ctx, rie, bootstrap, env, logs)
	if err != nil {
		return 0, 0, 0, err
	}
	defer em.Stop()
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _ = em.Invoke(ictx, event) // a refusal is fine: the init is what counts
	for range 100 {
		out := logs.String()
		p, r, i := initPhasePattern.FindStringSubmatch(out), initReportPattern.FindStringSubmatch(out), invokePattern.FindStringSubmatch(out)
		if p != nil && r != nil && i != nil {
			phase, _ = strconv.ParseFloat(p[1], 64)
			report, _ = strconv.ParseFloat(r[1], 64)
			invoke, _ = strconv.ParseFloat(i[1], 64)
			return phase, report, invoke, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, 0, 0, fmt.Errorf("the emulator reported no init duration:\n%s", logs.String())
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quantile is the q-th quantile of xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}
