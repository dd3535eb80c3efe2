package schemas

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

//go:embed *.schema.json
var files embed.FS

// baseURL prefixes every schema's $id.
const baseURL = "https://sagad.dev/schemas/"

// Name identifies an embedded schema; the file is Name + ".schema.json".
type Name string

// The embedded schemas.
const (
	Capsule      Name = "capsule"
	Checkpoint   Name = "checkpoint"
	Artifact     Name = "artifact"
	Review       Name = "review"
	Continuation Name = "continuation"
	// Chain is the document of sagactl publish --chain.
	Chain Name = "chain"
	// Composition is the document of sagactl compose: a graph of steps.
	Composition Name = "composition"
)

// Names returns every embedded schema name.
func Names() []Name {
	return []Name{Capsule, Checkpoint, Artifact, Review, Continuation, Chain, Composition}
}

func (n Name) file() string { return string(n) + ".schema.json" }

// URL returns the schema's $id, e.g. https://sagad.dev/schemas/capsule.schema.json.
func (n Name) URL() string { return baseURL + n.file() }

// ErrNotJSON is wrapped by the error [Validate] returns when raw is not a
// single well-formed UTF-8 JSON value.
var ErrNotJSON = errors.New("not JSON")

// ValidationError reports every place a document violates its schema.
type ValidationError struct {
	// Schema is the schema the document was validated against.
	Schema Name
	// Pointers are the JSON pointers (RFC 6901) of the offending instance
	// locations, sorted and unique; the document root is "/".
	Pointers []string
	// Details are "pointer: message" lines, sorted and unique.
	Details []string
}

// Error lists the details.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Schema, strings.Join(e.Details, "; "))
}

// Source returns the raw text of the named schema, or nil for an unknown name.
func Source(name Name) []byte {
	if !slices.Contains(Names(), name) {
		return nil
	}
	b, err := files.ReadFile(name.file())
	if err != nil {
		return nil
	}
	return b
}

// Validate checks the JSON document raw against the named schema. It returns
// nil when raw is valid, a [*ValidationError] when it violates the schema and
// an error wrapping [ErrNotJSON] when it is not JSON.
func Validate(name Name, raw []byte) error {
	set, schema, err := lookupSchema(name)
	if err != nil {
		return err
	}
	doc, err := decode(raw)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotJSON, err)
	}
	return set.validate(name, schema, doc)
}

// ValidateDoc is [Validate] for a document already decoded into nil, bool,
// string, json.Number, []any and map[string]any (capsule.ParseJSON's form).
// It does not change doc.
func ValidateDoc(name Name, doc any) error {
	set, schema, err := lookupSchema(name)
	if err != nil {
		return err
	}
	return set.validate(name, schema, doc)
}

// lookupSchema returns the compiled set and the named schema in it.
func lookupSchema(name Name) (*compiled, *jsonschema.Schema, error) {
	set, err := compileAll()
	if err != nil {
		return nil, nil, err
	}
	schema, ok := set.schemas[name]
	if !ok {
		return nil, nil, fmt.Errorf("schemas: unknown schema %q", name)
	}
	return set, schema, nil
}

func (set *compiled) validate(name Name, schema *jsonschema.Schema, doc any) error {
	if fastValid(name, doc) {
		return nil // see fast.go: the library would say valid too
	}
	if ptr, bad := outOfRange(name, doc); bad {
		return numberOutOfRange(name, []string{ptr})
	}
	err := library(name, schema, doc)
	var verr *jsonschema.ValidationError
	if errors.As(err, &verr) {
		return set.report(name, verr, doc)
	}
	if err != nil {
		return fmt.Errorf("validate %s: %w", name, err)
	}
	return nil
}

// library runs jsonschema/v5. It reads numbers that an integer type, a
// minimum or the like applies to as a big.Rat, and math/big refuses exponents
// past a million: the library then dereferences nil and panics. Where doc
// holds such numbers, that panic becomes a finding naming them (sorted), so
// that no document can end the process; elsewhere nothing changes.
func library(name Name, schema *jsonschema.Schema, doc any) (err error) {
	var huge []string
	unparsable(doc, "", &huge)
	if len(huge) > 0 {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(runtime.Error); !ok {
					panic(r)
				}
				slices.Sort(huge)
				err = numberOutOfRange(name, huge)
			}
		}()
	}
	return schema.Validate(doc)
}

// unparsable appends the pointer of every number in v that big.Rat refuses.
func unparsable(v any, at string, out *[]string) {
	switch x := v.(type) {
	case json.Number:
		if !ratParses(string(x)) {
			*out = append(*out, cmp.Or(at, "/"))
		}
	case map[string]any:
		for k, e := range x {
			unparsable(e, at+"/"+escape(k), out)
		}
	case []any:
		for i, e := range x {
			unparsable(e, at+"/"+strconv.Itoa(i), out)
		}
	}
}

func numberOutOfRange(name Name, pointers []string) *ValidationError {
	details := make([]string, len(pointers))
	for i, p := range pointers {
		details[i] = p + ": number out of range"
	}
	return &ValidationError{Schema: name, Pointers: pointers, Details: details}
}

// ValidateValue marshals v with encoding/json and validates the result, the
// way to prove that what the daemon writes matches its schema.
func ValidateValue(name Name, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("validate %s: marshal: %w", name, err)
	}
	return Validate(name, raw)
}

// compiled holds the compiled schemas and their decoded sources; the latter
// resolve error locations to member names.
type compiled struct {
	schemas map[Name]*jsonschema.Schema
	docs    map[string]any // by $id
}

var compileAll = sync.OnceValues(func() (*compiled, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	set := &compiled{schemas: map[Name]*jsonschema.Schema{}, docs: map[string]any{}}
	for _, n := range Names() {
		src := Source(n)
		if err := c.AddResource(n.URL(), bytes.NewReader(src)); err != nil {
			return nil, fmt.Errorf("schemas: add %s: %w", n.file(), err)
		}
		doc, err := decode(src)
		if err != nil {
			return nil, fmt.Errorf("schemas: decode %s: %w", n.file(), err)
		}
		set.docs[n.URL()] = doc
	}
	for _, n := range Names() {
		s, err := c.Compile(n.URL())
		if err != nil {
			return nil, fmt.Errorf("schemas: compile %s: %w", n.file(), err)
		}
		set.schemas[n] = s
	}
	return set, nil
})

// decode reads one JSON value, keeping numbers as json.Number as the
// validator expects.
func decode(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("invalid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level value")
	}
	return v, nil
}

// report flattens the validator's error tree into a [ValidationError].
func (set *compiled) report(name Name, verr *jsonschema.ValidationError, doc any) *ValidationError {
	var pointers, details []string
	set.leaves(verr, doc, func(ptr, msg string) {
		if ptr == "" {
			ptr = "/"
		}
		pointers = append(pointers, ptr)
		details = append(details, ptr+": "+msg)
	})
	slices.Sort(pointers)
	slices.Sort(details)
	return &ValidationError{Schema: name, Pointers: slices.Compact(pointers), Details: slices.Compact(details)}
}

// leaves calls add for every leaf error. The validator reports "required" and
// "additionalProperties" at the enclosing object; those are narrowed to the
// members at fault by reading the schema and the instance.
func (set *compiled) leaves(verr *jsonschema.ValidationError, doc any, add func(ptr, msg string)) {
	if len(verr.Causes) > 0 {
		for _, c := range verr.Causes {
			set.leaves(c, doc, add)
		}
		return
	}
	at := verr.InstanceLocation
	keyword := verr.KeywordLocation[strings.LastIndexByte(verr.KeywordLocation, '/')+1:]
	obj, _ := lookup(doc, at).(map[string]any)
	schema, _ := set.schemaAt(verr.AbsoluteKeywordLocation).(map[string]any)
	found := false
	switch {
	case obj == nil || schema == nil:
	case keyword == "required":
		required, _ := schema["required"].([]any)
		for _, r := range required {
			if k, ok := r.(string); ok {
				if _, present := obj[k]; !present {
					add(at+"/"+escape(k), "required property missing")
					found = true
				}
			}
		}
	case keyword == "additionalProperties":
		props, _ := schema["properties"].(map[string]any)
		for k := range obj {
			if _, known := props[k]; !known {
				add(at+"/"+escape(k), "property not allowed")
				found = true
			}
		}
	}
	if !found {
		add(at, verr.Message)
	}
}

// schemaAt returns the schema object holding the keyword at an absolute
// keyword location such as https://…/capsule.schema.json#/properties/task/required.
func (set *compiled) schemaAt(keywordLocation string) any {
	url, frag, ok := strings.Cut(keywordLocation, "#")
	if !ok {
		return nil
	}
	return lookup(set.docs[url], frag[:max(strings.LastIndexByte(frag, '/'), 0)])
}

// lookup resolves the JSON pointer ptr in v, or returns nil.
func lookup(v any, ptr string) any {
	if ptr == "" {
		return v
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = unescaper.Replace(tok)
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// JSON pointer token escaping, RFC 6901 §3–4.
var (
	escaper   = strings.NewReplacer("~", "~0", "/", "~1")
	unescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

func escape(tok string) string { return escaper.Replace(tok) }
