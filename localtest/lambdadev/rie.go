package lambdadev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/byorelay/byorelay/internal/lambdafn"
	"github.com/byorelay/byorelay/internal/sitefn"
)

// RIEModule is the Lambda runtime interface emulator, pinned: the same
// emulator `sam local invoke` runs inside its container, here run directly
// (it needs no Docker).
const RIEModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// InstallRIE returns the emulator binary in binDir, installing it with `go
// install` first if it is not there.
func InstallRIE(ctx context.Context, binDir string) (string, error) {
	bin := filepath.Join(binDir, "aws-lambda-rie")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.CommandContext(ctx, "go", "install", RIEModule)
	cmd.Env = append(os.Environ(), "GOBIN="+binDir, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install %s: %w\n%s", RIEModule, err, out)
	}
	return bin, nil
}

// BuildBootstrap builds functions/<name> (a relay or a site-stack function) into outDir/<name>/bootstrap
// exactly as it is deployed (static, lambda.norpc, trimmed, stripped) but
// for goarch: arm64 to deploy, the host's architecture to run under the
// emulator here (an arm64 binary does not run on an amd64 machine).
func BuildBootstrap(ctx context.Context, repoRoot, name, outDir, goarch string) (string, error) {
	if _, err := lambdafn.Lookup(name); err != nil {
		if _, siteErr := sitefn.Lookup(name); siteErr != nil {
			return "", err
		}
	}
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	out := filepath.Join(outDir, name, "bootstrap")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w",
		"-o", out, "./functions/"+name)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", name, err, b)
	}
	return out, nil
}

// BuildAll builds every function under functions/ as BuildBootstrap does,
// in one go build (one compile of the shared packages, the links in
// parallel), and returns each function's bootstrap path by name: the
// relay's (lambdafn.Functions) and any other stack's beside them.
func BuildAll(ctx context.Context, repoRoot, outDir, goarch string) (map[string]string, error) {
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	stage := filepath.Join(outDir, ".build")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w",
		"-o", stage+string(filepath.Separator), "./functions/...")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build functions: %w\n%s", err, b)
	}
	built, err := os.ReadDir(stage)
	if err != nil {
		return nil, err
	}
	paths := map[string]string{}
	for _, e := range built {
		dir := filepath.Join(outDir, e.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		out := filepath.Join(dir, "bootstrap")
		if err := os.Rename(filepath.Join(stage, e.Name()), out); err != nil {
			return nil, err
		}
		paths[e.Name()] = out
	}
	for _, f := range lambdafn.Functions() {
		if paths[f.Name] == "" {
			return nil, fmt.Errorf("build functions: %s was not built", f.Name)
		}
	}
	for _, f := range sitefn.Functions() {
		if paths[f.Name] == "" {
			return nil, fmt.Errorf("build functions: %s was not built", f.Name)
		}
	}
	return paths, os.Remove(stage)
}

// Emulator is a bootstrap running under the runtime interface emulator.
type Emulator struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// StartEmulator runs bootstrap under the emulator at rie with env added to
// this process's environment; the emulator's and the function's output go
// to logs. Both of the emulator's ports are picked free, so emulators can
// run side by side (its runtime API otherwise always takes 9001).
func StartEmulator(ctx context.Context, rie, bootstrap string, env []string, logs io.Writer) (*Emulator, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	api, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr, "--runtime-api-address", api, bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	// Its own process group: the emulator starts the bootstrap as a child,
	// and Stop must end both.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	e := &Emulator{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(e.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return e, nil
		}
		select {
		case <-e.done:
			return nil, errors.New("emulator exited before listening")
		case <-ctx.Done():
			e.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("emulator not listening on %s", addr)
		}
	}
}

// Invoke sends one event and returns the function's answer. A function
// error (the emulator's errorType payload) is an error.
func (e *Emulator) Invoke(ctx context.Context, event []byte) ([]byte, error) {
	url := "http://" + e.addr + "/2015-03-31/functions/function/invocations"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(event))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("invoke: %w", err)
	}
	if resp.StatusCode != http.StatusOK || bytes.Contains(body, []byte(`"errorType"`)) {
		return body, fmt.Errorf("invoke: function failed (%s): %s", resp.Status, body)
	}
	return body, nil
}

// Stop ends the emulator and the function under it.
func (e *Emulator) Stop() {
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	<-e.done
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
