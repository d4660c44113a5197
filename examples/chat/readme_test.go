package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/localtest"
	"github.com/byorelay/byorelay/localtest/fakellm"
	"github.com/byorelay/byorelay/localtest/peers"
)

// The cloud-lane recipe of docs/site.md, read from that page and followed step by
// step with the commands it names, built from this repository and run as
// processes: make run (byorelay-local serve, on DynamoDB Local), a daemon
// paired and approved with byorelay admin, then make example's page (the
// chat binary with the page's EXAMPLE_FLAGS). A prompt asked on the page
// must come back answered. Once with byorelay daemon, as the recipe says,
// and once with the real byollm 0.1.1 daemon in its place, which the page
// says pairs the same way. The only departures are the ones a test needs:
// free ports for the stack and the page, its own table, and its own
// working directory (BYORELAY_DEMO_DIR is that directory's .cache/demo,
// which is where make run keeps it in a checkout).
func TestTheSitePagesCloudLaneRecipeFinishesAJob(t *testing.T) {
	steps := readmeCloudRecipe(t)
	bin := buildRecipeCommands(t)
	t.Run("byorelay daemon", func(t *testing.T) { followRecipe(t, steps, bin, false, "") })
	t.Run("byollm 0.1.1 daemon", func(t *testing.T) {
		localtest.RequireNode(t, "byollm")
		followRecipe(t, steps, bin, true, "")
	})
	// The page's -stream: a job published as a live stream, which
	// byorelay daemon takes because it opts in by default.
	t.Run("byorelay daemon, -stream", func(t *testing.T) { followRecipe(t, steps, bin, false, "-stream") })
}

// readmeCloudRecipe is docs/site.md's cloud-lane block: its commands, in
// order, each without its comment.
func readmeCloudRecipe(t *testing.T) []string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "site.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if !strings.Contains(readme, "`byollm connect <url>` pairs the real daemon the same way") {
		t.Fatal("docs/site.md no longer says byollm connect pairs the real daemon the same way; this test runs that claim")
	}
	_, block, found := strings.Cut(readme, "# cloud: through the local relay")
	if !found {
		t.Fatal(`docs/site.md has no "# cloud: through the local relay" recipe`)
	}
	block, _, _ = strings.Cut(block, "```")
	var steps []string
	for _, line := range strings.Split(block, "\n")[1:] {
		line, _, _ = strings.Cut(line, " #")
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			steps = append(steps, line)
		}
	}
	if len(steps) == 0 {
		t.Fatal("the page's cloud recipe has no commands")
	}
	return steps
}

// recipeBin is where the recipe's commands were built.
type recipeBin struct{ byorelay, local, chat string }

func buildRecipeCommands(t *testing.T) recipeBin {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/byorelay", "./cmd/byorelay-local", "./examples/chat")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return recipeBin{byorelay: filepath.Join(dir, "byorelay"), local: filepath.Join(dir, "byorelay-local"), chat: filepath.Join(dir, "chat")}
}

// followRecipe runs the steps in a fresh working directory. With realDaemon
// the byorelay daemon step is the real byollm daemon instead; exampleFlag,
// if set, is added to EXAMPLE_FLAGS.
func followRecipe(t *testing.T, steps []string, bin recipeBin, realDaemon bool, exampleFlag string) {
	work := t.TempDir()
	// make run's own variable for where it keeps the demo keys and
	// stack.env, which byorelay daemon and byorelay admin read.
	env := append(os.Environ(), "BYORELAY_DEMO_DIR="+filepath.Join(work, ".cache", "demo"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stackURL, userCode, fingerprint, page string
	for _, step := range steps {
		t.Logf("docs/site.md: %s", step)
		switch {
		case step == "make run":
			serve := startProcess(t, ctx, work, env, bin.local, "serve", "--port", "0",
				"--ddb-endpoint", localtest.DynamoEndpoint(t), "--table", localtest.UniqueName("readme"), "--quiet")
			// serve's banner, printed once it answers.
			stackURL = serve.waitFor(t, regexp.MustCompile(`^\s*relay\s+(http://\S+)`))

		case strings.HasPrefix(step, "go run ./cmd/byorelay daemon "):
			if realDaemon {
				model := peers.NewModel(t, "readme-model")
				d := peers.StartDaemon(t, peers.DaemonOptions{Origin: stackURL, Model: model})
				userCode = d.UserCode(t)
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("byollm daemon:\n%s", d.Log())
					}
				})
				continue
			}
			args := strings.Fields(strings.TrimPrefix(step, "go run ./cmd/byorelay "))
			daemon := startProcess(t, ctx, work, env, bin.byorelay, args...)
			userCode = daemon.waitFor(t, regexp.MustCompile(`approve the code (\S+) `))
			fingerprint = daemon.waitFor(t, regexp.MustCompile(`^device (\S+), relay `))

		case strings.HasPrefix(step, "go run ./cmd/byorelay admin "):
			args := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(step, "go run ./cmd/byorelay "), "CODE", userCode))
			cmd := exec.CommandContext(ctx, bin.byorelay, args...)
			cmd.Dir, cmd.Env = work, env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", step, err, out)
			}
			if args[1] == "pairing" && fingerprint != "" && !strings.Contains(string(out), fingerprint) {
				t.Fatalf("admin pairing does not show the daemon's fingerprint %s:\n%s", fingerprint, out)
			}

		case strings.HasPrefix(step, "make example EXAMPLE_FLAGS='"):
			flags := strings.TrimSuffix(strings.TrimPrefix(step, "make example EXAMPLE_FLAGS='"), "'")
			// The page's port is make run's default; this stack's is free.
			flags = strings.ReplaceAll(flags, "http://127.0.0.1:8787", stackURL)
			args := append(strings.Fields(flags), "-addr", "127.0.0.1:0")
			if exampleFlag != "" {
				args = append(args, exampleFlag)
			}
			chat := startProcess(t, ctx, work, env, bin.chat, args...)
			page = chat.waitFor(t, regexp.MustCompile(`: open (http://\S+)`))

		default:
			t.Fatalf("the page's cloud recipe has a step this test does not know how to follow: %q", step)
		}
	}
	if page == "" || userCode == "" {
		t.Fatalf("the recipe never paired a daemon (%q) or served the page (%q)", userCode, page)
	}

	prompt := "hello from the README"
	want := "echo: " + prompt
	if realDaemon {
		want = fakellm.Answer(prompt)
	}
	var asked struct {
		ID string `json:"id"`
	}
	if status := postJSON(t, page+"/ask", map[string]string{"prompt": prompt}, &asked); status != http.StatusOK || asked.ID == "" {
		t.Fatalf("ask answered %d %+v", status, asked)
	}
	var v JobView
	for {
		if status := getJSON(t, page+"/jobs/"+asked.ID, &v); status != http.StatusOK {
			t.Fatalf("GET /jobs/%s: %d", asked.ID, status)
		}
		if v.Done {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the job did not finish: %+v", v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v.State != "ok" || v.Answer != want {
		t.Fatalf("the job ended %+v, want ok %q", v, want)
	}
}

// process is a command the recipe started, its output kept line by line.
type process struct {
	name  string
	mu    sync.Mutex
	lines []string
	more  chan struct{}
}

// startProcess runs name with args in dir until the test ends, when it is
// interrupted (as Ctrl-C stops it) and waited for.
func startProcess(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{name: filepath.Base(name) + " " + strings.Join(args, " "), more: make(chan struct{}, 1)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		p.read(out)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		stopped := make(chan struct{})
		go func() { <-read; _ = cmd.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-stopped
		}
		if t.Failed() {
			t.Logf("%s:\n%s", p.name, p.output())
		}
	})
	return p
}

func (p *process) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		p.mu.Unlock()
		select {
		case p.more <- struct{}{}:
		default:
		}
	}
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitFor waits for a line the pattern matches and returns its first group.
func (p *process) waitFor(t *testing.T, pattern *regexp.Regexp) string {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		p.mu.Lock()
		for _, line := range p.lines {
			if m := pattern.FindStringSubmatch(line); m != nil {
				p.mu.Unlock()
				return m[1]
			}
		}
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s never printed a line matching %s:\n%s", p.name, pattern, p.output())
		}
	}
}

// -stream is the cloud lane's: the direct lane answers whole, so asking for
// it there is a usage error, not a silently ignored flag.
func TestStreamIsTheCloudLanesFlag(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"-stream"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-stream is the cloud lane's") {
		t.Fatalf("-stream on the direct lane: exit %d, %q", code, errOut.String())
	}
}
