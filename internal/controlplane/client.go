package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/byorelay/byorelay/internal/projection"
)

// Client calls the admin API. The CLI uses it, and so can tests that drive
// a running stack.
type Client struct {
	base   string
	http   *http.Client
	token  string
	answer func(body []byte)
}

// NewClient returns a client for the server at endpoint (its base URL; a
// trailing /admin is accepted too). httpClient carries any request signing
// (see the CLI's SigV4 transport); http.DefaultClient if nil.
func NewClient(endpoint string, httpClient *http.Client) *Client {
	base := strings.TrimSuffix(strings.TrimRight(endpoint, "/"), AdminPrefix)
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{base: base, http: httpClient}
}

// WithToken returns a copy of c that sends token as a bearer credential,
// as the local stack's admin API requires (see LocalGuard).
func (c *Client) WithToken(token string) *Client {
	copied := *c
	copied.token = token
	return &copied
}

// WithAnswer returns a copy of c that hands each accepted answer's body,
// exactly as the API sent it, to record before decoding it. The CLI's
// --json prints those bytes, so a script reads what the API said and not
// a re-encoding that could drop a field this client does not know.
func (c *Client) WithAnswer(record func(body []byte)) *Client {
	copied := *c
	copied.answer = record
	return &copied
}

// ConsentAction names a consent change.
type ConsentAction string

const (
	ConsentAdd    ConsentAction = "add"
	ConsentPause  ConsentAction = "pause"
	ConsentResume ConsentAction = "resume"
	ConsentRevoke ConsentAction = "revoke"
)

// ExportJSON returns the stored fixture exactly as the API sent it (a
// projection of at most MaxWholeExportRecords records; ExportPage pages a
// larger one).
func (c *Client) ExportJSON(ctx context.Context) ([]byte, error) {
	_, body, err := c.do(ctx, http.MethodGet, "/fixture", nil)
	return body, err
}

// Export returns the stored fixture.
func (c *Client) Export(ctx context.Context) (projection.Fixture, error) {
	body, err := c.ExportJSON(ctx)
	if err != nil {
		return projection.Fixture{}, err
	}
	return projection.Parse(body)
}

// ExportPage returns one page of the stored projection, resuming after
// cursor ("" for the first).
func (c *Client) ExportPage(ctx context.Context, cursor string) (ExportPageResponse, error) {
	var out ExportPageResponse
	return out, c.call(ctx, http.MethodGet, "/fixture/pages?cursor="+url.QueryEscape(cursor), nil, &out)
}

// Import replaces the whole projection with a RelayFixture given as JSON,
// in one request. The bytes go as they are, so the server's strict parse
// judges them.
func (c *Client) Import(ctx context.Context, fixture []byte) (ImportResult, error) {
	var out ImportResult
	_, data, err := c.do(ctx, http.MethodPut, "/fixture", fixture)
	if err != nil {
		return out, err
	}
	return out, json.Unmarshal(data, &out)
}

// ImportPage sends one page of an import.
func (c *Client) ImportPage(ctx context.Context, req ImportPageRequest) (ImportPageResponse, error) {
	var out ImportPageResponse
	return out, c.call(ctx, http.MethodPost, "/fixture/import", req, &out)
}

// FinishImport runs one step of ending an import.
func (c *Client) FinishImport(ctx context.Context, req ImportFinishRequest) (ImportFinishResponse, error) {
	var out ImportFinishResponse
	return out, c.call(ctx, http.MethodPost, "/fixture/import/finish", req, &out)
}

// RegisterSite registers a site.
func (c *Client) RegisterSite(ctx context.Context, req RegisterSiteRequest) (SiteResponse, error) {
	var out SiteResponse
	return out, c.call(ctx, http.MethodPost, "/sites", req, &out)
}

// RotateSite moves a site to a new key.
func (c *Client) RotateSite(ctx context.Context, siteID string, req RotateSiteRequest) (SiteResponse, error) {
	var out SiteResponse
	return out, c.call(ctx, http.MethodPost, "/sites/"+url.PathEscape(siteID)+"/rotate", req, &out)
}

// Pairing shows the pending pairing a user code names.
func (c *Client) Pairing(ctx context.Context, userCode string) (Pairing, error) {
	var out Pairing
	return out, c.call(ctx, http.MethodGet, "/pairings/"+url.PathEscape(userCode), nil, &out)
}

// PendingPairings lists the pending pairings, newest first.
func (c *Client) PendingPairings(ctx context.Context) (PendingPairingsResponse, error) {
	var out PendingPairingsResponse
	return out, c.call(ctx, http.MethodGet, "/pairings/pending", nil, &out)
}

// Approve approves a pending pairing.
func (c *Client) Approve(ctx context.Context, req ApproveRequest) (DeviceResponse, error) {
	var out DeviceResponse
	return out, c.call(ctx, http.MethodPost, "/pairings/approve", req, &out)
}

// Deny refuses a pending pairing: its code stops resolving.
func (c *Client) Deny(ctx context.Context, req DenyRequest) (Pairing, error) {
	var out Pairing
	return out, c.call(ctx, http.MethodPost, "/pairings/deny", req, &out)
}

// RevokeDevice revokes a device by runner id.
func (c *Client) RevokeDevice(ctx context.Context, runnerID string) (DeviceResponse, error) {
	var out DeviceResponse
	return out, c.call(ctx, http.MethodPost, "/devices/"+url.PathEscape(runnerID)+"/revoke", nil, &out)
}

// Consent adds, pauses, resumes or revokes a consent.
func (c *Client) Consent(ctx context.Context, action ConsentAction, req ConsentRequest) (ConsentResponse, error) {
	path := "/consents"
	switch action {
	case ConsentAdd:
	case ConsentPause, ConsentResume, ConsentRevoke:
		path += "/" + string(action)
	default:
		return ConsentResponse{}, fmt.Errorf("unknown consent action %q", action)
	}
	var out ConsentResponse
	return out, c.call(ctx, http.MethodPost, path, req, &out)
}

// Map sets the service that answers a person's (purpose, kind) at a site.
func (c *Client) Map(ctx context.Context, req MapRequest) (MappingsResponse, error) {
	var out MappingsResponse
	return out, c.call(ctx, http.MethodPost, "/mappings", req, &out)
}

// Unmap removes a person's mapping of (purpose, kind) at a site.
func (c *Client) Unmap(ctx context.Context, req UnmapRequest) (MappingsResponse, error) {
	var out MappingsResponse
	return out, c.call(ctx, http.MethodPost, "/mappings/delete", req, &out)
}

// SetSitePurposes replaces the purposes a site declares (none declares
// every purpose).
func (c *Client) SetSitePurposes(ctx context.Context, siteID string, purposes []string) (SiteResponse, error) {
	var out SiteResponse
	if purposes == nil {
		purposes = []string{}
	}
	return out, c.call(ctx, http.MethodPut, "/sites/"+url.PathEscape(siteID)+"/purposes", SitePurposesRequest{Purposes: purposes}, &out)
}

// MapUnique maps every unmapped slot whose owner's devices offer exactly
// one service for its kind (or, with dryRun, says what it would map).
func (c *Client) MapUnique(ctx context.Context, dryRun bool) (MapUniqueResponse, error) {
	var out MapUniqueResponse
	return out, c.call(ctx, http.MethodPost, "/mappings/unique", MapUniqueRequest{DryRun: dryRun}, &out)
}

// Person is the operator's view of one person.
func (c *Client) Person(ctx context.Context, owner string) (PersonResponse, error) {
	var out PersonResponse
	return out, c.call(ctx, http.MethodGet, "/people/"+url.PathEscape(owner), nil, &out)
}

// PutRoster creates or replaces a roster.
func (c *Client) PutRoster(ctx context.Context, id string, req RosterRequest) (RosterResponse, error) {
	var out RosterResponse
	return out, c.call(ctx, http.MethodPut, "/rosters/"+url.PathEscape(id), req, &out)
}

// DeleteRoster deletes a roster.
func (c *Client) DeleteRoster(ctx context.Context, id string) (VersionResponse, error) {
	var out VersionResponse
	return out, c.call(ctx, http.MethodDelete, "/rosters/"+url.PathEscape(id), nil, &out)
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	_, data, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: unreadable answer: %w", method, path, err)
	}
	return nil
}

// do sends one request and returns a refusal as an *Error.
func (c *Client) do(ctx context.Context, method, path string, body []byte) (*http.Response, []byte, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+AdminPrefix+path, reader)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var refusal ErrorResponse
		if json.Unmarshal(data, &refusal) == nil && refusal.Error != "" {
			return nil, nil, &Error{Status: resp.StatusCode, Code: refusal.Error, Message: refusal.Message}
		}
		return nil, nil, &Error{Status: resp.StatusCode, Code: "http-" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(data))}
	}
	if c.answer != nil {
		c.answer(data)
	}
	return resp, data, nil
}
