package main

import (
	"fmt"
	"io"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/localtest/demo"
)

// printBanner says what is running and how to point a daemon, a site and
// the admin CLI at it.
func (ls *localStack) printBanner(w io.Writer) {
	admin := ls.url + controlplane.AdminPrefix
	projection := fmt.Sprintf("imported the demo projection (version %d)", ls.version)
	if !ls.imported {
		projection = fmt.Sprintf("the projection already in table %s kept", ls.table)
	}
	mode := "direct mode: daemons paired here run their owner's jobs only (--grants for team routing)"
	if ls.grantKey != "" {
		mode = "relayed (grant) mode: daemons paired here get the control-plane key and run\n                 only jobs with a grant, roster members' jobs included; key " + ls.grantKey
	}
	debug := ""
	if ls.debug {
		debug = fmt.Sprintf("  debug page     %s/debug?site=%s\n", ls.url, demo.SiteID)
	}
	title := "every function of template.yaml on one port, routed as\nAPI Gateway routes them, over DynamoDB."
	storeLine := fmt.Sprintf("  DynamoDB       %s   table %s", ls.ddbEndpoint, ls.table)
	invoke := fmt.Sprintf(`One function, as 'sam local invoke' would, on this stack's table (events/README.md):
  TABLE_NAME=%s AWS_ENDPOINT_URL_DYNAMODB=%s make invoke FN=claim

Requests over 6 MB of Lambda event are refused with API Gateway's 413.
`, ls.table, ls.ddbEndpoint)
	gone := "the routing state and the projection stay in DynamoDB at " + ls.ddbEndpoint
	if ls.ddbDir != "" {
		storeLine += "\n                 tables kept in " + ls.ddbDir + " across runs (--fresh, or make run FRESH=1, starts empty)"
		gone = "the tables stay in " + ls.ddbDir
	}
	if ls.store == storeMemory {
		title = "the relay on plain net/http over this process's\nmemory, as the reference relay runs, with the admin API beside it."
		storeLine = "  store          memory (this process's: a stop or a crash loses every job and pairing)"
		invoke = ""
		gone = "the routing state and the projection go with it"
	}
	exposed := ""
	if ls.hosts == nil {
		exposed = "  (listening beyond loopback with --expose-admin: the admin API is reachable from the\n   network, guarded by the token only, which travels in clear over HTTP)\n"
	}
	fmt.Fprintf(w, `
byorelay local stack: %[18]s

  relay          %[1]s
  daemon plane   %[1]s/byollm/{pair,claim,fetch,heartbeat,result,release}
  site plane     %[1]s/relay/site/{enqueue,payload,cancel,pending,results}
  admin API      %[2]s   (bearer token below; IAM-authorised when deployed)
  admin console  %[1]s%[15]s#token=%[14]s
%[17]s%[3]s%[4]s
  grants         %[13]s

Admin token for this run (also in %[16]s, which 'make demo' and
'byorelay admin' read; a new one every run):
  export BYORELAY_ADMIN_URL=%[2]s BYORELAY_ADMIN_TOKEN=%[14]s

Demo, %[6]s:
  site id        %[7]s
  site key id    %[8]s
  owner          %[9]s, consenting to %[7]s
  demo device    %[10]s (owner %[9]s, approved), for scripted clients
  keys           %[11]s   (site: site-keys.json, site.env; device: device-keys.json)
                 secret, made on first run and reused; never commit them

Watch a Go site and a Go daemon finish jobs: make demo   (in another terminal)

Point a byollm daemon at it (it pairs as a new device of %[9]s; HOME keeps its
state apart from your own ~/.byollm):
  HOME=%[11]s/byollm-home localtest/js/node_modules/.bin/byollm connect %[1]s
open the admin console link above (it carries this run's token; the URL the
daemon prints is the same page without it, which asks for the token): its
pending list shows the pairing; check the key id is the fingerprint the
daemon printed and click Approve for %[9]s; or from a terminal:
  go run ./cmd/byorelay admin pairings                        # who is asking
  go run ./cmd/byorelay admin approve XXXX-XXXX --owner %[9]s
docs/local.md ("A real byollm daemon") goes on to a model and a job.

Point a site at it (@byollm/server's cloud lane):
  relayOrigin %[1]s, siteId %[7]s, and the site keys from
  set -a; . %[12]s; set +a     # BYOLLM_SITE_KEYS, BYOLLM_RELAY_ORIGIN, BYOLLM_SITE_ID

%[5]sCtrl-C stops everything; %[19]s, the keys stay.
`, ls.url, admin, debug, storeLine, invoke, projection,
		demo.SiteID, ls.demo.Site.KeyID(), demo.Owner, demo.RunnerID, ls.demoDir, ls.siteEnv, mode,
		ls.adminToken, controlplane.ConsolePath, ls.stackEnv, exposed, title, gone)
}
