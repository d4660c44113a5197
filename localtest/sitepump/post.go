package sitepump

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
)

func post(ctx context.Context, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("emulator: %s answered %d", url, resp.StatusCode)
	}
	return nil
}
