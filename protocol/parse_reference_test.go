package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The parser protocol used before parse.go, kept as the reference the fast
// parser is compared with (parse_test.go and FuzzParseJSONMatchesReference):
// a json.Decoder token walk. It is slow on a 6 MiB body and recursive, so
// nesting about a million deep overflows the stack; apart from that, every
// body it accepts or refuses is the contract.

// parseJSONReference parses exactly one JSON value of the body's text
// (BodyText), as JSON.parse does. (Its old comment said encoding/json
// refuses nesting beyond 10000 levels; a token walk has no such limit, and
// 100000 levels parse.)
func parseJSONReference(data []byte) (node, error) {
	dec := json.NewDecoder(bytes.NewReader(BodyText(data)))
	dec.UseNumber()
	n, err := refParseNode(dec)
	if err != nil {
		return node{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return node{}, errors.New("data after the JSON value")
	}
	return n, nil
}

func refParseNode(dec *json.Decoder) (node, error) {
	tok, err := dec.Token()
	if err != nil {
		return node{}, err
	}
	return refParseFrom(dec, tok)
}

func refParseFrom(dec *json.Decoder, tok json.Token) (node, error) {
	switch t := tok.(type) {
	case nil:
		return node{kind: kindNull}, nil
	case bool:
		return node{kind: kindBool, boolean: t}, nil
	case json.Number:
		return node{kind: kindNumber, text: string(t)}, nil
	case string:
		return node{kind: kindString, text: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := node{kind: kindArray, items: []node{}}
			for dec.More() {
				item, err := refParseNode(dec)
				if err != nil {
					return node{}, err
				}
				n.items = append(n.items, item)
			}
			if _, err := dec.Token(); err != nil {
				return node{}, err
			}
			return n, nil
		case '{':
			n := node{kind: kindObject, members: []member{}}
			for dec.More() {
				keyTok, err := dec.Token()
				if err != nil {
					return node{}, err
				}
				key, _ := keyTok.(string)
				value, err := refParseNode(dec)
				if err != nil {
					return node{}, err
				}
				n.setMember(key, value)
			}
			if _, err := dec.Token(); err != nil {
				return node{}, err
			}
			return n, nil
		}
	}
	return node{}, fmt.Errorf("unexpected token %v", tok)
}
