package bench

import (
	"encoding/json"
	"fmt"

	"github.com/byorelay/byorelay/internal/projection"
	"github.com/byorelay/byorelay/protocol"
)

// site is a registered site the benchmark signs for.
type site struct {
	id   string
	keys *protocol.Keys
}

// daemon is an approved device with its own owner, consenting to every
// site: the unit of concurrency, one lifecycle at a time each.
type daemon struct {
	runnerID string
	owner    string
	keys     *protocol.Keys
}

// world is the sites and daemons of one run, with keys generated for the
// run: nothing is stored, nothing is reused.
type world struct {
	sites   []site
	daemons []daemon
	// grants maps every consent's slot to the daemons' service, and has
	// byorelay's targets sign grants (Config.Grants).
	grants bool
}

func newWorld(sites, daemons int) (*world, error) {
	w := &world{}
	for i := range sites {
		k, err := protocol.GenerateKeys()
		if err != nil {
			return nil, err
		}
		w.sites = append(w.sites, site{id: fmt.Sprintf("bench-site-%02d", i), keys: k})
	}
	for i := range daemons {
		k, err := protocol.GenerateKeys()
		if err != nil {
			return nil, err
		}
		w.daemons = append(w.daemons, daemon{
			runnerID: fmt.Sprintf("bench-runner-%03d", i),
			owner:    fmt.Sprintf("bench-owner-%03d", i),
			keys:     k,
		})
	}
	return w, nil
}

// fixture is the projection every target routes by: each site registered,
// each device approved for its owner, each owner consenting to every site.
// Owners of the background queue (deepOwner) have no device and need no
// consent: enqueue checks none, and nothing is meant to claim their work.
func (w *world) fixture() projection.Fixture {
	f := projection.EmptyFixture()
	for _, s := range w.sites {
		f.Sites = append(f.Sites, projection.SiteRecord{SiteID: s.id, Site: s.keys.Public()})
	}
	for _, d := range w.daemons {
		f.Devices = append(f.Devices, projection.DeviceRecord{Owner: d.owner, RunnerID: d.runnerID, Device: d.keys.Public()})
		for _, s := range w.sites {
			c := projection.ConsentRecord{Owner: d.owner, SiteID: s.id}
			if w.grants {
				c.Mappings = []projection.Mapping{{Purpose: projection.ReservedPurpose, Kind: capability.Kind, Service: capability.Service}}
			}
			f.Consents = append(f.Consents, c)
		}
	}
	return f
}

// fixtureJSON is the projection as the reference relay reads it.
func (w *world) fixtureJSON() ([]byte, error) { return json.Marshal(w.fixture()) }

// deepOwners is how many distinct owners the background queue is spread
// over.
const deepOwners = 1000

func deepOwner(n int) string { return fmt.Sprintf("deep-owner-%04d", n%deepOwners) }

// capability is the one row every benchmark daemon advertises.
var capability = protocol.Capability{
	Kind: protocol.KindGenerate, Service: "primary", BackendID: "ollama",
	BackendClass: "http", Model: "bench", OfferScope: protocol.AudiencePrivate,
}

// stub is a small private job for owner, from s.
func (s site) stub(id, owner string, deadlineAt int64) protocol.JobStub {
	return protocol.JobStub{
		ID: id, Kind: protocol.KindGenerate, Owner: owner, Site: s.keys.KeyID(),
		Audience: protocol.AudiencePrivate, SizeClass: "small", DeadlineAt: deadlineAt,
	}
}
