package agentproto

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Protocol constants (§2, §3, §11).
const (
	// ServiceName is the NATS micro service name every agent registers.
	ServiceName = "agents"
	// ProtocolVersion is the major.minor this package speaks.
	ProtocolVersion = "0.3"
	// PromptPrefix, StatusPrefix and HeartbeatPrefix start the verb-first
	// subjects agents.<verb>.<agent>.<owner>.<session>.
	PromptPrefix    = "agents.prompt."
	StatusPrefix    = "agents.status."
	HeartbeatPrefix = "agents.hb."
	// InfoSubject is where every agent instance answers discovery.
	InfoSubject = "$SRV.INFO." + ServiceName
	// ErrorCodeHeader and ErrorHeader carry an error frame (§9).
	ErrorCodeHeader = "Nats-Service-Error-Code"
	ErrorHeader     = "Nats-Service-Error"
)

// Chunk types (§6).
const (
	TypeStatus   = "status"
	TypeResponse = "response"
	TypeQuery    = "query"
	// StatusAck is the status chunk that opens a stream and keeps it alive.
	StatusAck = "ack"
)

// Limits on what a decoder accepts from an agent.
const (
	// MaxChunk bounds one chunk's bytes; NATS's own max payload is the
	// real bound, this one keeps a hostile frame from costing more.
	MaxChunk = 64 << 20
	// MaxQueryPrompt bounds a query's question.
	MaxQueryPrompt = 64 << 10
	// MaxErrorDescription bounds an error frame's description (§9.1 says
	// 200 characters; more is cut, not refused).
	MaxErrorDescription = 1024
)

// ErrMalformed is wrapped by every decoding error of this package.
var ErrMalformed = errors.New("agentproto: malformed")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// Attachment is a file sent with a prompt or a response: its basename and
// its content in standard padded base64 (§5.2).
type Attachment struct {
	Filename string `json:"filename"`
	Content  string `json:"content"`
}

// NewAttachment encodes data under filename's basename.
func NewAttachment(filename string, data []byte) Attachment {
	return Attachment{Filename: path.Base(filename), Content: base64.StdEncoding.EncodeToString(data)}
}

// Envelope is a prompt request (§5.1).
type Envelope struct {
	Prompt      string       `json:"prompt"`
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Encode is the envelope's JSON; an empty prompt is refused (the agent
// would answer 400).
func (e Envelope) Encode() ([]byte, error) {
	if strings.TrimSpace(e.Prompt) == "" {
		return nil, errors.New("agentproto: empty prompt")
	}
	return json.Marshal(e)
}

// FrameKind says what one message of a response stream is.
type FrameKind int

// Frame kinds.
const (
	// FrameChunk is a JSON chunk (its Chunk is set).
	FrameChunk FrameKind = iota + 1
	// FrameEnd is the terminator: an empty body without headers.
	FrameEnd
	// FrameError is an error frame: Code and Description are set.
	FrameError
)

// Frame is one decoded message of a response stream.
type Frame struct {
	Kind        FrameKind
	Chunk       Chunk
	Code        int
	Description string
}

// Chunk is one JSON chunk. Type is always set; unknown types come back
// with no other field set and must be ignored (§6.6).
type Chunk struct {
	Type string
	// Status is a status chunk's token ("ack", "cost:{…}", anything).
	Status string
	// Text is a response chunk's text, in either §6.3 form.
	Text string
	// Attachments are a response chunk's files (the object form).
	Attachments []Attachment
	// Query is a query chunk's question.
	Query *Query
}

// Query is a query chunk's data (§7).
type Query struct {
	ID           string       `json:"id"`
	ReplySubject string       `json:"reply_subject"`
	Prompt       string       `json:"prompt"`
	Attachments  []Attachment `json:"attachments,omitempty"`
}

// DecodeFrame decodes one message of a response stream: its body and
// whether it had headers, and the error headers' values. An error frame
// is recognised by its code header alone; a body without headers that is
// empty ends the stream.
func DecodeFrame(data []byte, hasHeaders bool, code, description string) (Frame, error) {
	if code != "" || description != "" {
		n, err := strconv.Atoi(strings.TrimSpace(code))
		if err != nil || n < 100 || n > 999 {
			return Frame{}, malformed("error frame code %q is not a 3-digit status", clip(code, 16))
		}
		return Frame{Kind: FrameError, Code: n, Description: clip(oneLine(description), MaxErrorDescription)}, nil
	}
	if len(data) == 0 {
		if hasHeaders {
			return Frame{}, malformed("empty frame with headers and no error code")
		}
		return Frame{Kind: FrameEnd}, nil
	}
	c, err := DecodeChunk(data)
	if err != nil {
		return Frame{}, err
	}
	return Frame{Kind: FrameChunk, Chunk: c}, nil
}

// DecodeChunk decodes a JSON chunk (§6.2): plain text is refused, an
// unknown type is returned with only Type set.
func DecodeChunk(data []byte) (Chunk, error) {
	if len(data) > MaxChunk {
		return Chunk{}, malformed("chunk of %d bytes exceeds %d", len(data), MaxChunk)
	}
	if !utf8.Valid(data) {
		return Chunk{}, malformed("chunk is not UTF-8")
	}
	var raw struct {
		Type *string         `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Chunk{}, malformed("chunk is not a JSON object: %v", err)
	}
	if raw.Type == nil {
		return Chunk{}, malformed("chunk has no type")
	}
	c := Chunk{Type: *raw.Type}
	switch c.Type {
	case TypeStatus:
		if err := json.Unmarshal(raw.Data, &c.Status); err != nil || len(raw.Data) == 0 {
			return Chunk{}, malformed("status chunk's data is not a string")
		}
	case TypeResponse:
		return decodeResponse(c, raw.Data)
	case TypeQuery:
		q, err := decodeQuery(raw.Data)
		if err != nil {
			return Chunk{}, err
		}
		c.Query = &q
	}
	return c, nil
}

func decodeResponse(c Chunk, data json.RawMessage) (Chunk, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		if err := json.Unmarshal(data, &c.Text); err != nil {
			return Chunk{}, malformed("response chunk's text: %v", err)
		}
		return c, nil
	}
	var obj struct {
		Text        *string      `json:"text"`
		Attachments []Attachment `json:"attachments"`
	}
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &obj) != nil {
		return Chunk{}, malformed("response chunk's data is neither a string nor {text, attachments}")
	}
	if obj.Text != nil {
		c.Text = *obj.Text
	}
	for i, a := range obj.Attachments {
		if err := a.check(); err != nil {
			return Chunk{}, malformed("response attachments[%d]: %v", i, err)
		}
	}
	c.Attachments = obj.Attachments
	return c, nil
}

func decodeQuery(data json.RawMessage) (Query, error) {
	var q Query
	if len(data) == 0 || json.Unmarshal(data, &q) != nil {
		return Query{}, malformed("query chunk's data is not {id, reply_subject, prompt}")
	}
	switch {
	case q.ID == "" || len(q.ID) > 256:
		return Query{}, malformed("query id must be 1 to 256 bytes")
	case !LiteralSubject(q.ReplySubject):
		return Query{}, malformed("query reply_subject %q is not a literal NATS subject", clip(q.ReplySubject, 64))
	case len(q.Prompt) > MaxQueryPrompt:
		return Query{}, malformed("query prompt of %d bytes exceeds %d", len(q.Prompt), MaxQueryPrompt)
	}
	for i, a := range q.Attachments {
		if err := a.check(); err != nil {
			return Query{}, malformed("query attachments[%d]: %v", i, err)
		}
	}
	return q, nil
}

func (a Attachment) check() error {
	if a.Filename == "" || a.Filename != path.Base(a.Filename) || strings.ContainsAny(a.Filename, "\\\x00") {
		return fmt.Errorf("filename %q is not a basename", clip(a.Filename, 64))
	}
	if _, err := base64.StdEncoding.DecodeString(a.Content); err != nil {
		return fmt.Errorf("content is not standard base64: %v", err)
	}
	return nil
}

// LiteralSubject reports whether s is a NATS subject without wildcards,
// whitespace or empty tokens, at most 512 bytes.
func LiteralSubject(s string) bool {
	if s == "" || len(s) > 512 {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
		for _, r := range tok {
			if r <= ' ' || r == 0x7f || r == utf8.RuneError {
				return false
			}
		}
	}
	return true
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// clip cuts s to n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
