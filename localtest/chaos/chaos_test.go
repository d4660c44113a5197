package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/internal/repo"
	"github.com/byorelay/byorelay/localtest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := runWorker(role); err != nil {
			fmt.Fprintf(os.Stderr, "chaos %s %s: %v\n", role, os.Getenv(envName), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	localtest.Main(m)
}

// config is one run's shape, from the environment (BYORELAY_CHAOS_*), with
// the smoke's defaults: small enough for `make test`, with every kind of
// process killed at least a few times.
type config struct {
	jobs, replicas, sites, daemons, owners, inflight int
	killEvery, lease, awaiting, sweep, deadline      time.Duration
}

// chaosDueShards is the due index's shard count here: sized to this
// fleet as docs/sizing.md's formula sizes a deployment's (a few jobs a second
// need one shard), not the template's default for 10,000 jobs a second.
// The run compresses a deployment's minutes into seconds (a sweep every
// second, not every minute), and at the default count each replica's
// sweep would query 512 partitions a second of one DynamoDB Local, which
// slows every request the kills are meant to race.
const chaosDueShards = 8

func configFromEnv(t *testing.T) config {
	c := config{jobs: 100, replicas: 3, sites: 2, daemons: 8, owners: 4, inflight: 40,
		killEvery: time.Second, lease: 4 * time.Second, awaiting: 2 * time.Second,
		sweep: time.Second, deadline: 60 * time.Second}
	for name, p := range map[string]*int{"JOBS": &c.jobs, "REPLICAS": &c.replicas, "SITES": &c.sites,
		"DAEMONS": &c.daemons, "OWNERS": &c.owners, "INFLIGHT": &c.inflight} {
		if v := os.Getenv("BYORELAY_CHAOS_" + name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				t.Fatalf("BYORELAY_CHAOS_%s=%q is not a positive integer", name, v)
			}
			*p = n
		}
	}
	for name, p := range map[string]*time.Duration{"KILL_EVERY": &c.killEvery, "LEASE": &c.lease,
		"AWAITING": &c.awaiting, "SWEEP": &c.sweep, "JOB_DEADLINE": &c.deadline} {
		if v := os.Getenv("BYORELAY_CHAOS_" + name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("BYORELAY_CHAOS_%s=%q is not a positive duration", name, v)
			}
			*p = d
		}
	}
	return c
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: processes, DynamoDB Local, kills")
	}
	cfg := configFromEnv(t)
	started := time.Now()
	dir := t.TempDir()
	ddb := localtest.DynamoEndpoint(t)
	bin := buildByorelay(t, dir)
	seedBytes := make([]byte, 16)
	if _, err := rand.Read(seedBytes); err != nil {
		t.Fatal(err)
	}
	seed := hex.EncodeToString(seedBytes)
	table := localtest.UniqueName("chaos")

	// The world: sites, owners who consent to every site, two or more
	// devices per owner, all approved up front (pairing is not what is
	// under test).
	var siteIDs, owners, runners []string
	ownerOf := map[string]string{}
	for i := range cfg.sites {
		siteIDs = append(siteIDs, fmt.Sprintf("site-%d", i))
	}
	for i := range cfg.owners {
		owners = append(owners, fmt.Sprintf("owner-%d", i))
	}
	for i := range cfg.daemons {
		r := fmt.Sprintf("runner-%d", i)
		runners = append(runners, r)
		ownerOf[r] = owners[i%len(owners)]
	}
	fixture, siteOfKey := buildFixture(t, seed, siteIDs, owners, runners, ownerOf)

	var urls []string
	for range cfg.replicas {
		urls = append(urls, "http://"+freeAddr(t))
	}
	sup := &supervisor{t: t, dir: dir}
	defer sup.stopAll()
	// Each replica its own demo dir: serve writes its admin token there.
	demoDir := func(i int) string { return filepath.Join(dir, fmt.Sprintf("demo-%d", i)) }
	replicaArgs := func(i int, u string) []string {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
		return []string{"serve", "--ddb-endpoint", ddb, "--table", table, "--port", port,
			"--demo-dir", demoDir(i), "--quiet",
			"--lease", cfg.lease.String(), "--awaiting", cfg.awaiting.String(), "--sweep-every", cfg.sweep.String(),
			"--due-shards", strconv.Itoa(chaosDueShards)}
	}
	var replicas []*proc
	for i, u := range urls {
		p := sup.add(fmt.Sprintf("replica-%d", i), bin, replicaArgs(i, u), nil, true)
		replicas = append(replicas, p)
		waitListening(t, u, 90*time.Second)
		if i == 0 {
			// Every replica reads the projection from the table: one import.
			raw, err := json.Marshal(fixture)
			if err != nil {
				t.Fatal(err)
			}
			admin := controlplane.NewClient(u+controlplane.AdminPrefix, nil).WithToken(adminToken(t, demoDir(i)))
			if _, err := admin.Import(context.Background(), raw); err != nil {
				t.Fatalf("import the projection: %v", err)
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	common := []string{envSeed + "=" + seed, envReplicas + "=" + strings.Join(urls, ",")}
	var daemons []*proc
	for _, r := range runners {
		env := append(common, envRole+"=daemon", envName+"="+r, envOwner+"="+ownerOf[r],
			envLog+"="+filepath.Join(dir, r+".log"))
		daemons = append(daemons, sup.add(r, self, nil, env, true))
	}
	var sites []*proc
	for i, s := range siteIDs {
		share := cfg.jobs / cfg.sites
		if i < cfg.jobs%cfg.sites {
			share++
		}
		env := append(common, envRole+"=site", envName+"="+s, envSlowSeal+"="+os.Getenv(envSlowSeal), envOwners+"="+strings.Join(owners, ","),
			envSiteJobs+"="+strconv.Itoa(share), envInflight+"="+strconv.Itoa(cfg.inflight),
			envDeadline+"="+cfg.deadline.String(), envLog+"="+filepath.Join(dir, s+".log"))
		sites = append(sites, sup.add(s, self, nil, env, false))
	}
	t.Logf("up: %d replicas, %d daemons, %d sites in %v", len(replicas), len(daemons), len(sites), time.Since(started).Round(time.Millisecond))

	// Chaos until every site has seen every job end: SIGKILL a random
	// replica or daemon by pid; its supervisor restarts it a moment later.
	// Never the last live replica: a relay with no instance is an outage,
	// not chaos.
	victims := append(append([]*proc{}, replicas...), daemons...)
	stopChaos := make(chan struct{})
	var chaosDone sync.WaitGroup
	chaosDone.Add(1)
	var kills atomic.Int64
	go func() {
		defer chaosDone.Done()
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(time.Duration(float64(cfg.killEvery) * (0.5 + mrand.Float64()))):
			}
			v := victims[mrand.IntN(len(victims))]
			if v.isReplica(replicas) && liveCount(replicas) <= 1 {
				continue
			}
			if v.kill() {
				kills.Add(1)
			}
		}
	}()
	// Generous: a loaded machine runs a few jobs a second, and a job that
	// is stuck ends at its deadline anyway.
	// Progress, for a long run: how many jobs have ended so far.
	go func() {
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(30 * time.Second):
			}
			ended := 0
			for _, s := range siteIDs {
				data, _ := os.ReadFile(filepath.Join(dir, s+".log"))
				ended += strings.Count(string(data), "\nend ")
			}
			fmt.Printf("chaos progress: %d of %d jobs ended, %d kills, %v\n", ended, cfg.jobs, kills.Load(), time.Since(started).Round(time.Second))
		}
	}()
	budget := cfg.deadline + time.Duration(cfg.jobs)*time.Second + 2*time.Minute
	for _, s := range sites {
		if err := s.waitExit(budget); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
	close(stopChaos)
	chaosDone.Wait()
	sup.stopAll()
	wall := time.Since(started)

	rep := tally(t, dir, siteIDs, runners, siteOfKey)
	restarts := 0
	for _, p := range victims {
		restarts += p.starts - 1
	}
	summary := fmt.Sprintf("chaos: %d jobs, %d sites, %d daemons (%d owners), %d replicas on one DynamoDB Local; "+
		"%d kills (SIGKILL by pid), %d restarts; lease %v, awaiting %v, sweep %v; wall %v\n%s",
		cfg.jobs, cfg.sites, cfg.daemons, cfg.owners, cfg.replicas, kills.Load(), restarts,
		cfg.lease, cfg.awaiting, cfg.sweep, wall.Round(time.Second), rep)
	fmt.Println(summary)
	t.Log(summary)
	if rep.published != cfg.jobs {
		t.Errorf("published %d of %d jobs", rep.published, cfg.jobs)
	}
	if rep.lost != 0 || rep.duplicated != 0 || rep.wrong != 0 {
		t.Errorf("lost %d, duplicated %d, wrong %d: want 0, 0, 0\n%s", rep.lost, rep.duplicated, rep.wrong, strings.Join(rep.examples, "\n"))
	}
}

// report is what the logs say happened.
type report struct {
	published                                     int
	verified, failed, cancelled, expired, evicted int
	lost, duplicated, wrong                       int
	accepted                                      int
	examples                                      []string
}

func (r report) String() string {
	return fmt.Sprintf("verified %d  failed %d  cancelled %d  expired %d  evicted %d  lost %d  duplicated %d  wrong %d  (published %d; results the relay accepted: %d)",
		r.verified, r.failed, r.cancelled, r.expired, r.evicted, r.lost, r.duplicated, r.wrong, r.published, r.accepted)
}

// tally reads every worker's log. A job is lost if its site never learnt
// its fate, or if a device's result was accepted by the relay and the site
// ended it as anything but that result (the lost seal, an eviction of
// finished work). It is duplicated if its site reported two fates, or two
// devices' results were both accepted. It is wrong if the verified result
// is not the echo of what the site asked.
func tally(t *testing.T, dir string, siteIDs, runners []string, siteOfKey map[string]string) report {
	t.Helper()
	var rep report
	// Every line ends with a time (ms, one host's clock): a job's deadline
	// on pub, when the relay's acceptance was heard on acc, when the site
	// reported the fate on end. Only a lost job's example reads them.
	published := map[string]bool{}
	deadline, acceptedAt, endedAt := map[string]int64{}, map[string]int64{}, map[string]int64{}
	at := func(f []string) int64 {
		ms, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		return ms
	}
	fates := map[string][]string{}
	for _, s := range siteIDs {
		readLines(t, filepath.Join(dir, s+".log"), func(f []string) {
			switch {
			case len(f) == 3 && f[0] == "pub":
				published[f[1]] = true
				deadline[f[1]] = at(f)
			case len(f) == 4 && f[0] == "end":
				fates[f[1]] = append(fates[f[1]], f[2])
				endedAt[f[1]] = at(f)
			}
		})
	}
	accepted := map[string]int{}
	for _, r := range runners {
		readLines(t, filepath.Join(dir, r+".log"), func(f []string) {
			if len(f) == 4 && f[0] == "acc" {
				// Job ids carry their site's id, so the key id only checks.
				if _, ok := siteOfKey[f[1]]; ok {
					accepted[f[2]]++
					acceptedAt[f[2]] = at(f)
					rep.accepted++
				}
			}
		})
	}
	rep.published = len(published)
	ids := make([]string, 0, len(published))
	for id := range published {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	example := func(format string, args ...any) {
		if len(rep.examples) < 20 {
			rep.examples = append(rep.examples, fmt.Sprintf(format, args...))
		}
	}
	for _, id := range ids {
		f := fates[id]
		if len(f) > 1 || accepted[id] > 1 {
			rep.duplicated++
			example("duplicated %s: fates %v, accepted %d times", id, f, accepted[id])
		}
		if len(f) == 0 {
			rep.lost++
			example("lost %s: no fate (accepted %d times)", id, accepted[id])
			continue
		}
		switch f[0] {
		case "verified":
			rep.verified++
		case "wrong":
			rep.wrong++
			example("wrong %s", id)
		case "failed":
			rep.failed++
		case "cancelled":
			rep.cancelled++
		case "expired":
			rep.expired++
		case "evicted":
			rep.evicted++
		}
		if accepted[id] > 0 && f[0] != "verified" && f[0] != "wrong" && f[0] != "cancelled" {
			rep.lost++
			example("lost %s: the relay accepted its result (heard at deadline%+dms), the site ended it %s (at deadline%+dms)",
				id, acceptedAt[id]-deadline[id], f[0], endedAt[id]-deadline[id])
		}
	}
	return rep
}

func readLines(t *testing.T, path string, each func(fields []string)) {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		each(strings.Fields(sc.Text()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// buildFixture is the projection: every site registered, every owner
// consenting to every site, every device approved. It returns the site id
// of each site key id.
func buildFixture(t *testing.T, seed string, siteIDs, owners, runners []string, ownerOf map[string]string) (projection.Fixture, map[string]string) {
	t.Helper()
	f := projection.EmptyFixture()
	siteOfKey := map[string]string{}
	for _, s := range siteIDs {
		k, err := keysFor(seed, s)
		if err != nil {
			t.Fatal(err)
		}
		f.Sites = append(f.Sites, projection.SiteRecord{SiteID: s, Site: k.Public()})
		siteOfKey[k.KeyID()] = s
		for _, o := range owners {
			f.Consents = append(f.Consents, projection.ConsentRecord{Owner: o, SiteID: s})
		}
	}
	for _, r := range runners {
		k, err := keysFor(seed, r)
		if err != nil {
			t.Fatal(err)
		}
		f.Devices = append(f.Devices, projection.DeviceRecord{Owner: ownerOf[r], RunnerID: r, Device: k.Public()})
	}
	if _, err := projection.New(f); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return f, siteOfKey
}

// buildByorelay compiles the CLI the replicas run.
func buildByorelay(t *testing.T, dir string) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "byorelay-local")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/byorelay-local")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build byorelay: %v\n%s", err, out)
	}
	return bin
}

// adminToken is the local admin API's per-run token, from the env file the
// replica writes into its demo dir (shortly after it starts listening).
func adminToken(t *testing.T, demoDir string) string {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		data, _ := os.ReadFile(filepath.Join(demoDir, "stack.env"))
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, controlplane.EnvAdminToken+"="); ok && v != "" {
				return v
			}
		}
	}
	t.Fatalf("no %s in %s/stack.env", controlplane.EnvAdminToken, demoDir)
	return ""
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitListening(t *testing.T, u string, limit time.Duration) {
	t.Helper()
	addr := strings.TrimPrefix(u, "http://")
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("%s never listened", u)
}
