package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/byorelay/byorelay/controlplane"
	"github.com/byorelay/byorelay/controlplane/admincli"
	"github.com/byorelay/byorelay/localtest/demo"
)

// siteEnvFile is where serve writes the demo site's environment, beside the
// demo keys.
const siteEnvFile = "site.env"

// writeSiteEnv writes the environment a @byollm/server site needs to run as
// the demo site against relayURL: BYOLLM_SITE_KEYS in the form its
// siteKeysFromEnv reads (base64 of the StoredKeys JSON), and the origin and
// site id its cloud lane takes. Owner-only: it holds the site's secret.
func writeSiteEnv(dir string, w *demo.World, relayURL string, now time.Time) (string, error) {
	stored, err := json.Marshal(w.Site.Stored(now.UnixMilli()))
	if err != nil {
		return "", err
	}
	env := "# The demo site for the byorelay local stack. Secret: never commit.\n" +
		"BYOLLM_SITE_KEYS=" + base64.StdEncoding.EncodeToString(stored) + "\n" +
		"BYOLLM_RELAY_ORIGIN=" + relayURL + "\n" +
		"BYOLLM_SITE_ID=" + demo.SiteID + "\n"
	path := filepath.Join(dir, siteEnvFile)
	return path, os.WriteFile(path, []byte(env), 0o600)
}

// stackEnvFile is where serve says where the running stack is, beside the
// demo keys: `byorelay demo` and `byorelay admin` read it, so they find a
// stack started on any port without being told.
const stackEnvFile = "stack.env"

// The variables in stackEnvFile. BYORELAY_ADMIN_URL and the token are the
// ones `byorelay admin` reads from the environment, so the file can also be
// sourced into a shell.
const envRelayURL = "BYORELAY_URL"

// stackEnv is what stackEnvFile holds.
type stackEnv struct {
	URL        string
	AdminToken string
}

// writeStackEnv writes the running stack's env file. Owner-only: it holds
// the admin token.
func writeStackEnv(dir string, e stackEnv) (string, error) {
	env := "# The running byorelay local stack (byorelay serve). Secret: never commit.\n" +
		envRelayURL + "=" + e.URL + "\n" +
		admincli.EnvEndpoint + "=" + e.URL + controlplane.AdminPrefix + "\n" +
		controlplane.EnvAdminToken + "=" + e.AdminToken + "\n"
	path := filepath.Join(dir, stackEnvFile)
	return path, os.WriteFile(path, []byte(env), 0o600)
}

// readStackEnv reads the env file a running stack wrote in dir; found is
// false when there is none (no stack running, or it stopped cleanly).
func readStackEnv(dir string) (e stackEnv, found bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, stackEnvFile))
	if errors.Is(err, fs.ErrNotExist) {
		return stackEnv{}, false, nil
	}
	if err != nil {
		return stackEnv{}, false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch k {
		case envRelayURL:
			e.URL = v
		case controlplane.EnvAdminToken:
			e.AdminToken = v
		}
	}
	return e, e.URL != "", nil
}

// removeStackEnv deletes the env file if it still describes the stack at
// url: another stack started since owns it now.
func removeStackEnv(dir, url string) {
	if e, found, _ := readStackEnv(dir); found && e.URL == url {
		_ = os.Remove(filepath.Join(dir, stackEnvFile))
	}
}
