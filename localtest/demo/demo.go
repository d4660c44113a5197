// Package demo is the local stack's demo world: one site and one paired,
// consented daemon (and, for the site stack, the same daemon paired to a
// direct-lane site holding the demo site's keys, with a job queued), with
// keys generated on first use into the directory Load is given (the
// commands' is git-ignored: cmd/internal/localstack.Dir) and
// reused by everything local (the local server, `make invoke`, the invoke
// test), so a request signed by one is accepted by the others. No key
// material is ever committed: a fresh clone makes its own.
//
// It also prepares the sample events in events/: a committed event cannot
// stay validly signed (signatures are fresh for ±120 s), so Prepare fills
// in the demo keys' values and re-signs it just before an invoke.
package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// The demo identities. The sample events name them literally.
const (
	SiteID   = "demo-site"
	RunnerID = "runner-demo"
	Owner    = "demo-user"
	// JobID is the job the sample events enqueue, seal and report on.
	JobID = "demo-job-1"
	// Service is the service the demo's own device advertises for every
	// kind, and the one the demo owner's consent maps each kind to: with
	// grants on, a job is granted only for the service its owner mapped.
	Service = "default"
)

// World is the demo's keys. It holds private keys: it lives on the
// developer's machine and in tests, never in a deployment.
type World struct {
	Site   *protocol.Keys
	Daemon *protocol.Keys
}

// Load reads the demo keys from dir, generating any that are missing.
func Load(dir string) (*World, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	site, err := loadOrCreate(filepath.Join(dir, "site-keys.json"))
	if err != nil {
		return nil, err
	}
	daemon, err := loadOrCreate(filepath.Join(dir, "device-keys.json"))
	if err != nil {
		return nil, err
	}
	return &World{Site: site, Daemon: daemon}, nil
}

// loadOrCreate reads a key file, or writes a new one. Two processes may
// start at once (the local server and a test): the file is written aside
// and linked into place, so the loser of the race reads the winner's keys
// rather than overwriting them with keys nothing else has.
func loadOrCreate(path string) (*protocol.Keys, error) {
	if k, err := read(path); !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	keys, err := protocol.GenerateKeys()
	if err != nil {
		return nil, err
	}
	raw, err := json.MarshalIndent(keys.Stored(time.Now().UnixMilli()), "", "  ")
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keys-*")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return read(path)
}

func read(path string) (*protocol.Keys, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var stored protocol.StoredKeys
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("demo: %s: %w", path, err)
	}
	k, err := stored.Keys()
	if err != nil {
		return nil, fmt.Errorf("demo: %s: %w", path, err)
	}
	return k, nil
}

// Fixture is the demo projection: the site registered, the daemon approved
// for its owner, the owner consented to the site with every kind of a stub
// naming no purpose mapped to their own Service.
func (w *World) Fixture() projection.Fixture {
	f := projection.EmptyFixture()
	f.Sites = []projection.SiteRecord{{SiteID: SiteID, Site: w.Site.Public()}}
	f.Devices = []projection.DeviceRecord{{Owner: Owner, RunnerID: RunnerID, Device: w.Daemon.Public()}}
	consent := projection.ConsentRecord{Owner: Owner, SiteID: SiteID}
	for _, kind := range protocol.JobKinds {
		consent.Mappings = append(consent.Mappings, projection.Mapping{Purpose: projection.ReservedPurpose, Kind: kind, Service: Service})
	}
	f.Consents = []projection.ConsentRecord{consent}
	return f
}
