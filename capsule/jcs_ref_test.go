package capsule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// parseTokens is the parser RECEPTION used before the scanner: a walk over
// encoding/json's tokens. It stays here as the reference the scanner is held
// to.
func parseTokens(raw []byte) (any, error) {
	// encoding/json silently replaces invalid UTF-8 with U+FFFD.
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrInvalidJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the top-level value", ErrInvalidJSON)
	}
	if err := checkSurrogates(raw); err != nil {
		return nil, err
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, decodeError(err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= MaxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d levels", ErrInvalidJSON, MaxDepth)
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, decodeError(err)
			}
			key, ok := tok.(string)
			if !ok {
				return nil, fmt.Errorf("%w: object key is %v, not a string", ErrInvalidJSON, tok)
			}
			if _, dup := obj[key]; dup {
				return nil, fmt.Errorf("%w: duplicate object key %q", ErrInvalidJSON, key)
			}
			if obj[key], err = parseValue(dec, depth+1); err != nil {
				return nil, err
			}
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, decodeError(err)
		}
		return obj, nil
	case '[':
		arr := []any{}
		for dec.More() {
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := dec.Token(); err != nil { // ']'
			return nil, decodeError(err)
		}
		return arr, nil
	}
	// The decoder hands out '{' and '[' only where a value starts.
	return nil, fmt.Errorf("%w: unexpected %v", ErrInvalidJSON, delim)
}

func decodeError(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %w", ErrInvalidJSON, err)
}
