package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// RunStream sends one chat completion with stream: true and hands over each
// content delta as it arrives (OpenAI's server-sent events: `data: {json}`
// lines, `data: [DONE]` last).
func (b OpenAIBackend) RunStream(ctx context.Context, prompt string, delta func(string)) (Answer, error) {
	resp, limit, cancel, err := b.send(ctx, prompt, true)
	if err != nil {
		return Answer{}, err
	}
	defer cancel()
	defer resp.Body.Close()
	var text strings.Builder
	stop := "unknown"
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64*1024), 1<<20)
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data:")
		if !ok {
			continue // comments, event names, blank separators
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			return Answer{Text: text.String(), Stop: stop}, nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return Answer{}, &BackendError{Code: "backend-error", Message: "the model server's stream was not in OpenAI chat-completion shape"}
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		c := chunk.Choices[0]
		if c.Delta.Content != "" {
			if int64(text.Len()+len(c.Delta.Content)) > limit {
				return Answer{}, &BackendError{Code: "output-too-large", Message: fmt.Sprintf("the model produced more than %d bytes", limit)}
			}
			text.WriteString(c.Delta.Content)
			delta(c.Delta.Content)
		}
		if c.FinishReason != nil {
			if s, ok := finishReasons[*c.FinishReason]; ok {
				stop = s
			}
		}
	}
	if ctx.Err() != nil {
		return Answer{}, &BackendError{Code: "canceled", Message: "the job was canceled"}
	}
	if err := lines.Err(); err != nil {
		return Answer{}, &BackendError{Code: "backend-unreachable", Message: "reading the stream: " + err.Error()}
	}
	// A stream that ends without [DONE] ended early: say so rather than
	// claim the answer ran to completion.
	return Answer{Text: text.String(), Stop: "unknown"}, nil
}
