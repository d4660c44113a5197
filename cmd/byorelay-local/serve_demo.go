package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/byorelay/byorelay/cmd/internal/localstack"
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

// loadDemoWorld is the demo keys in the local stack's directory, made on
// first use: one set for serve, site, invoke and the demos, so a request
// signed by one is accepted by the others.
func loadDemoWorld() (*demo.World, error) {
	dir, err := localstack.Dir()
	if err != nil {
		return nil, err
	}
	return demo.Load(dir)
}
