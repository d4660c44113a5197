// Package admincli is `byorelay admin`: the admin API's commands on the
// command line, talking HTTP to a local stack or, SigV4-signed, to a
// deployment's IAM-authorised admin route.
package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/byorelay/byorelay/internal/controlplane"
	"github.com/byorelay/byorelay/protocol"
)

// now is the clock an answer without one of its own is told against.
var now = time.Now

// EnvEndpoint names the environment variable holding the default endpoint.
const EnvEndpoint = "BYORELAY_ADMIN_URL"

const usage = `usage: byorelay admin [--endpoint URL] [--sigv4] [--region R] <command> ...

commands:
  import FILE                   replace the whole projection with a RelayFixture (FILE or - for stdin):
                                the file is checked whole, then sent page by page with progress on
                                stderr, then what it does not name is removed; any size, in a page
                                of memory
  export                        print the projection as a RelayFixture, read page by page
  migrate --table T [--drop-legacy]
                                copy a projection stored as one document (the layout before
                                records) into records, straight in DynamoDB table T with the AWS
                                SDK's default credentials, leaving the document; --drop-legacy
                                deletes the document and copies nothing (README, "Upgrading")
  site add ID FILE              register a site; FILE holds its PublicIdentity JSON
  site rotate ID FILE           rotate a site's key; FILE holds {"site":PublicIdentity,"succession":Succession},
                                the succession signed by the site's current key
  site purposes ID [--purposes a,b,...]
                                set the purposes a site declares; none (the default) declares every
                                purpose, and a stub naming none is judged under "default"
  pairings                      list the pending pairings, newest first: code, key id (the fingerprint
                                the daemon printed), label, platform, daemon version, capabilities,
                                expiry; never a device code
  pairing USERCODE              show one pending pairing, the same fields
  approve USERCODE --owner O [--runner R]
                                approve a pending pairing (runner id minted when not given)
  deny USERCODE                 refuse a pending pairing: its code stops resolving
  revoke-device RUNNER          revoke a device: its next request is refused
  consent add|pause|resume|revoke --owner O --site S
  map --owner O --site S --kind K --service SVC [--service-owner P] [--purpose U]
                                the service that answers O's jobs of kind K (and purpose U, or
                                "default" for jobs that name none) at site S: SVC in P's namespace
                                (O's own when not given; P's rosters must name O)
  unmap --owner O --site S --kind K [--purpose U]
                                remove that choice: O's jobs of that slot wait, unmapped
  map-unique [--dry-run]        map every unmapped slot (purpose "default" and each declared one, every
                                kind) whose owner's devices advertise exactly one service for the kind,
                                and list the slots left for a person to choose (README, "Upgrading")
  person OWNER                  a person's consents and mappings, the services their and their
                                teammates' devices advertise, and their queued jobs waiting on a slot
                                nobody mapped, with the live services that could answer each
  roster set ID --owner O [--members a,b,...]
  roster delete ID

flags (before or after the command):
  --endpoint URL   the admin API's base URL (default $BYORELAY_ADMIN_URL)
  --sigv4          sign requests with SigV4 for execute-api, with the AWS SDK's
                   default credentials (always on for a non-loopback endpoint)
  --region R       the region to sign for (default: from the endpoint's host name,
                   else the AWS configuration)
  --token T        the local stack's admin token (default $BYORELAY_ADMIN_TOKEN;
                   'make run' prints it); deployments use SigV4 instead
  --json           print the API's answer as JSON, for scripts (default: a table, or a
                   sentence for a change); export always prints JSON
`

// Run runs `byorelay admin args...` and returns the exit code: 0 done,
// 1 failed (the API refused or could not be reached), 2 misused.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{endpoint: os.Getenv(EnvEndpoint), token: os.Getenv(controlplane.EnvAdminToken)}
	top := flag.NewFlagSet("byorelay admin", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	g.register(top)
	if err := top.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	} else if err != nil {
		return misuse(stderr, err)
	}
	if top.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if top.Arg(0) == "migrate" {
		return migrate(ctx, top.Args()[1:], stdout, stderr)
	}
	cmd, err := parseCommand(g, top.Args())
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		return misuse(stderr, err)
	}
	client, err := g.client(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "byorelay admin: %v\n", err)
		return 1
	}
	p := &printer{w: stdout, progress: stderr, json: g.json, now: now}
	client = client.WithAnswer(func(body []byte) { p.raw = body })
	if err := cmd(ctx, client, p); err != nil {
		fmt.Fprintf(stderr, "byorelay admin: %v\n", err)
		return 1
	}
	return 0
}

func misuse(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "byorelay admin: %v\n\n%s", err, usage)
	return 2
}

// command is one parsed invocation, ready to run against the API; it
// prints the answer through p.
type command func(ctx context.Context, c *controlplane.Client, p *printer) error

// parseCommand turns the words after the global flags into a command.
func parseCommand(g *globals, args []string) (command, error) {
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" {
		return nil, flag.ErrHelp
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs)
	spec, known := commands[name]
	var f commandFlags
	f.register(fs, spec.flags)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return nil, err
	}
	if !known {
		return nil, fmt.Errorf("unknown command %q", name)
	}
	return spec.parse(pos, f)
}

// commandSpec is one command: the flags it takes besides the global ones,
// and how its positional arguments and those flags make the command.
type commandSpec struct {
	flags []string
	parse func(pos []string, f commandFlags) (command, error)
}

// commands are the admin commands by name (migrate, which talks to
// DynamoDB rather than the API, is run before any of these are parsed).
var commands = map[string]commandSpec{
	"import":        {parse: parseImport},
	"export":        {parse: parseExport},
	"site":          {flags: []string{"purposes"}, parse: parseSite},
	"map":           {flags: []string{"owner", "site", "kind", "service", "service-owner", "purpose"}, parse: parseMap},
	"unmap":         {flags: []string{"owner", "site", "kind", "purpose"}, parse: parseUnmap},
	"map-unique":    {flags: []string{"dry-run"}, parse: parseMapUnique},
	"person":        {parse: parsePerson},
	"pairings":      {parse: parsePairings},
	"pairing":       {parse: parsePairing},
	"approve":       {flags: []string{"owner", "runner"}, parse: parseApprove},
	"deny":          {parse: parseDeny},
	"revoke-device": {parse: parseRevokeDevice},
	"consent":       {flags: []string{"owner", "site"}, parse: parseConsent},
	"roster":        {flags: []string{"owner", "members"}, parse: parseRoster},
}

// commandFlags are the values of the flags a command takes.
type commandFlags struct {
	owner, runner, site, members string
	kind, service, serviceOwner  string
	purpose, purposes            string
	dryRun                       bool
}

// register defines the named flags on fs.
func (f *commandFlags) register(fs *flag.FlagSet, names []string) {
	vars := map[string]*string{"owner": &f.owner, "runner": &f.runner, "site": &f.site, "members": &f.members,
		"kind": &f.kind, "service": &f.service, "service-owner": &f.serviceOwner, "purpose": &f.purpose, "purposes": &f.purposes}
	for _, name := range names {
		if name == "dry-run" {
			fs.BoolVar(&f.dryRun, name, false, "")
			continue
		}
		fs.StringVar(vars[name], name, "", "")
	}
}

// need refuses positional arguments that are not n in number, naming the
// command's shape.
func need(pos []string, n int, shape string) error {
	if len(pos) != n {
		return fmt.Errorf("usage: %s", shape)
	}
	return nil
}

func parseImport(pos []string, _ commandFlags) (command, error) {
	if err := need(pos, 1, "import FILE"); err != nil {
		return nil, err
	}
	return importFile(pos[0]), nil
}

func parseExport(pos []string, _ commandFlags) (command, error) {
	if err := need(pos, 0, "export"); err != nil {
		return nil, err
	}
	return exportAll, nil
}

func parseSite(pos []string, f commandFlags) (command, error) {
	if len(pos) > 0 && pos[0] == "purposes" {
		if err := need(pos, 2, "site purposes ID [--purposes a,b,...]"); err != nil {
			return nil, err
		}
		return sitePurposes(pos[1], splitList(f.purposes)), nil
	}
	if len(pos) == 0 || (pos[0] != "add" && pos[0] != "rotate") {
		return nil, errors.New("usage: site add ID FILE | site rotate ID FILE | site purposes ID [--purposes a,b]")
	}
	if err := need(pos, 3, "site "+pos[0]+" ID FILE"); err != nil {
		return nil, err
	}
	if pos[0] == "add" {
		return siteAdd(pos[1], pos[2]), nil
	}
	return siteRotate(pos[1], pos[2]), nil
}

func parsePairings(pos []string, _ commandFlags) (command, error) {
	if err := need(pos, 0, "pairings"); err != nil {
		return nil, err
	}
	return listPairings, nil
}

func parsePairing(pos []string, _ commandFlags) (command, error) {
	if err := need(pos, 1, "pairing USERCODE"); err != nil {
		return nil, err
	}
	return showPairing(pos[0]), nil
}

func parseApprove(pos []string, f commandFlags) (command, error) {
	if err := need(pos, 1, "approve USERCODE --owner O [--runner R]"); err != nil {
		return nil, err
	}
	if f.owner == "" {
		return nil, errors.New("approve needs --owner")
	}
	return approve(controlplane.ApproveRequest{UserCode: pos[0], Owner: f.owner, RunnerID: f.runner}), nil
}

func parseDeny(pos []string, _ commandFlags) (command, error) {
	if err := need(pos, 1, "deny USERCODE"); err != nil {
		return nil, err
	}
	return deny(pos[0]), nil
}

func parseRevokeDevice(pos []string, _ commandFlags) (command, error) {
	if err := need(pos, 1, "revoke-device RUNNER"); err != nil {
		return nil, err
	}
	return revokeDevice(pos[0]), nil
}

func parseConsent(pos []string, f commandFlags) (command, error) {
	shape := "consent add|pause|resume|revoke --owner O --site S"
	if err := need(pos, 1, shape); err != nil {
		return nil, err
	}
	action := controlplane.ConsentAction(pos[0])
	switch action {
	case controlplane.ConsentAdd, controlplane.ConsentPause, controlplane.ConsentResume, controlplane.ConsentRevoke:
	default:
		return nil, fmt.Errorf("usage: %s", shape)
	}
	if f.owner == "" || f.site == "" {
		return nil, errors.New("consent needs --owner and --site")
	}
	return consent(action, controlplane.ConsentRequest{Owner: f.owner, SiteID: f.site}), nil
}

func parseRoster(pos []string, f commandFlags) (command, error) {
	if len(pos) == 2 && pos[0] == "delete" {
		return rosterDelete(pos[1]), nil
	}
	if len(pos) != 2 || pos[0] != "set" {
		return nil, errors.New("usage: roster set ID --owner O [--members a,b] | roster delete ID")
	}
	if f.owner == "" {
		return nil, errors.New("roster set needs --owner")
	}
	return rosterSet(pos[1], controlplane.RosterRequest{Owner: f.owner, Members: splitList(f.members)}), nil
}

// splitList is a comma-separated flag's values; none is an empty list.
func splitList(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

func parseMap(pos []string, f commandFlags) (command, error) {
	if err := need(pos, 0, "map --owner O --site S --kind K --service SVC [--service-owner P] [--purpose U]"); err != nil {
		return nil, err
	}
	if f.owner == "" || f.site == "" || f.kind == "" || f.service == "" {
		return nil, errors.New("map needs --owner, --site, --kind and --service")
	}
	req := controlplane.MapRequest{Owner: f.owner, SiteID: f.site, Purpose: f.purpose, Kind: f.kind, Service: f.service, ServiceOwner: f.serviceOwner}
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.Map(ctx, req)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderMappings(w, res) })
	}, nil
}

func parseUnmap(pos []string, f commandFlags) (command, error) {
	if err := need(pos, 0, "unmap --owner O --site S --kind K [--purpose U]"); err != nil {
		return nil, err
	}
	if f.owner == "" || f.site == "" || f.kind == "" {
		return nil, errors.New("unmap needs --owner, --site and --kind")
	}
	req := controlplane.UnmapRequest{Owner: f.owner, SiteID: f.site, Purpose: f.purpose, Kind: f.kind}
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.Unmap(ctx, req)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderMappings(w, res) })
	}, nil
}

func parseMapUnique(pos []string, f commandFlags) (command, error) {
	if err := need(pos, 0, "map-unique [--dry-run]"); err != nil {
		return nil, err
	}
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.MapUnique(ctx, f.dryRun)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderMapUnique(w, res) })
	}, nil
}

func parsePerson(pos []string, _ commandFlags) (command, error) {
	if err := need(pos, 1, "person OWNER"); err != nil {
		return nil, err
	}
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.Person(ctx, pos[0])
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderPerson(w, res) })
	}, nil
}

func sitePurposes(id string, purposes []string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.SetSitePurposes(ctx, id, purposes)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderPurposes(w, res) })
	}
}

// parseInterleaved parses flags wherever they sit among the positional
// arguments (the standard package stops at the first positional), so
// `approve CODE --owner alice` reads as a person writes it.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func siteAdd(id, path string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		var site protocol.PublicIdentity
		if err := readStrict(path, &site); err != nil {
			return err
		}
		res, err := c.RegisterSite(ctx, controlplane.RegisterSiteRequest{SiteID: id, Site: site})
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderSite(w, "registered", res, p.now()) })
	}
}

func siteRotate(id, path string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		var req controlplane.RotateSiteRequest
		if err := readStrict(path, &req); err != nil {
			return err
		}
		res, err := c.RotateSite(ctx, id, req)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderSite(w, "rotated", res, p.now()) })
	}
}

func listPairings(ctx context.Context, c *controlplane.Client, p *printer) error {
	res, err := c.PendingPairings(ctx)
	if err != nil {
		return err
	}
	return p.show(func(w io.Writer) error { return renderPairings(w, res) })
}

func showPairing(code string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.Pairing(ctx, code)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderPairing(w, res, p.now()) })
	}
}

func approve(req controlplane.ApproveRequest) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.Approve(ctx, req)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderDevice(w, "approved", res) })
	}
}

func deny(code string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.Deny(ctx, controlplane.DenyRequest{UserCode: code})
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderDenied(w, res) })
	}
}

func revokeDevice(runner string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.RevokeDevice(ctx, runner)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderDevice(w, "revoked", res) })
	}
}

func consent(action controlplane.ConsentAction, req controlplane.ConsentRequest) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.Consent(ctx, action, req)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderConsent(w, res) })
	}
}

func rosterSet(id string, req controlplane.RosterRequest) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.PutRoster(ctx, id, req)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error { return renderRoster(w, res.Roster, res.Version) })
	}
}

func rosterDelete(id string) command {
	return func(ctx context.Context, c *controlplane.Client, p *printer) error {
		res, err := c.DeleteRoster(ctx, id)
		if err != nil {
			return err
		}
		return p.show(func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "deleted roster %s; projection version %d\n", id, res.Version)
			return err
		})
	}
}

func readInput(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}

// readStrict reads a JSON file as strictly as the API will, so a typo is
// reported against the file rather than as a server refusal.
func readStrict(path string, v protocol.Validator) error {
	data, err := readInput(path)
	if err != nil {
		return err
	}
	if err := protocol.DecodeStrict(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
