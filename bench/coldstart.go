package bench

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/byorelay/byorelay/lambdafn"
	"github.com/byorelay/byorelay/localtest/lambdadev"
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
// with a hello-world start, one cold start per emulator.
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
	cs := &ColdStart{
		Runs: runs,
		Note: fmt.Sprintf("sizes: linux/arm64 builds as deployed; init: linux/%s builds of the same code under the runtime interface emulator on this machine (an arm64 binary does not run on %s)",
			runtime.GOARCH, runtime.GOARCH),
	}
	names := []string{helloName}
	for _, f := range lambdafn.Functions() {
		names = append(names, f.Name)
	}
	env := []string{
		"TABLE_NAME=bench-coldstart", "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
		"AWS_ENDPOINT_URL_DYNAMODB=" + ddbEndpoint, "METRICS_NAMESPACE=byorelay",
	}
	arm, err := buildAll(ctx, repoRoot, filepath.Join(dir, "arm64"), "arm64")
	if err != nil {
		return nil, err
	}
	boot, err := buildAll(ctx, repoRoot, filepath.Join(dir, runtime.GOARCH), runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	// Functions of other stacks under functions/ (the site stack's) are
	// sized too, after the relay's; their init needs their own stack's
	// environment and is not measured here.
	var others []string
	for name := range arm {
		if !slices.Contains(names, name) {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	for _, name := range append(slices.Clone(names), others...) {
		fc := FunctionCost{Name: name}
		if fc.Arm64Bytes, fc.Arm64ZipBytes, err = sizes(arm[name]); err != nil {
			return nil, err
		}
		cs.Functions = append(cs.Functions, fc)
	}
	hello := &cs.Functions[0]
	cold := func(name string) (phase, report float64, err error) {
		// On a loaded machine the emulator now and then starts the
		// bootstrap before its runtime API listens ("failed to get the next
		// invoke: … connection refused"): that start measured nothing, so
		// it is made again in a fresh emulator, a few times at most.
		for range 3 {
			if phase, report, err = initDuration(ctx, rie, boot[name], env, eventFor(name)); err == nil {
				return phase, report, nil
			}
		}
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	started := time.Now()
	total := (len(names) - 1) * runs
	done := 0
	for i := 1; i < len(names); i++ {
		fc := &cs.Functions[i]
		for r := range runs {
			var fp, fr, hp, hr float64
			var err error
			// Alternate who goes first: a start warms the page cache and the
			// scheduler for the one after it.
			if r%2 == 0 {
				if hp, hr, err = cold(helloName); err == nil {
					fp, fr, err = cold(fc.Name)
				}
			} else {
				if fp, fr, err = cold(fc.Name); err == nil {
					hp, hr, err = cold(helloName)
				}
			}
			if err != nil {
				return nil, err
			}
			fc.InitMs, fc.ReportInitMs = append(fc.InitMs, fp), append(fc.ReportInitMs, fr)
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
	}
	hello.InitMedianMs = median(hello.InitMs)
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
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, "./bench/hello")
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

// eventFor is an invoke that needs nothing to exist: an HTTP request the
// relay refuses before any lookup, or a sweep of an absent table. Only the
// init before it is measured; the answer is not.
func eventFor(name string) []byte {
	switch name {
	case helloName, lambdafn.Sweeper:
		return []byte(`{}`)
	}
	return []byte(`{"version":"2.0","routeKey":"$default","rawPath":"/byollm/claim","headers":{},"requestContext":{"http":{"method":"POST","path":"/byollm/claim"}},"isBase64Encoded":false}`)
}

// The emulator's two init figures: rapid's init phase report, and the
// REPORT line written as Lambda writes it to CloudWatch Logs.
var (
	initPhasePattern  = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	initReportPattern = regexp.MustCompile(`Init Duration: ([0-9.]+) ms`)
)

// initDuration starts one emulator, invokes once (the init runs on the
// first invoke) and reads both init figures.
func initDuration(ctx context.Context, rie, bootstrap string, env []string, event []byte) (phase, report float64, err error) {
	logs := &syncBuffer{}
	em, err := lambdadev.StartEmulator(ctx, rie, bootstrap, env, logs)
	if err != nil {
		return 0, 0, err
	}
	defer em.Stop()
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _ = em.Invoke(ictx, event) // a refusal is fine: the init is what counts
	for range 100 {
		out := logs.String()
		p, r := initPhasePattern.FindStringSubmatch(out), initReportPattern.FindStringSubmatch(out)
		if p != nil && r != nil {
			phase, _ = strconv.ParseFloat(p[1], 64)
			report, _ = strconv.ParseFloat(r[1], 64)
			return phase, report, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, 0, fmt.Errorf("the emulator reported no init duration:\n%s", logs.String())
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
