// Package agentproto is the wire of the Agent Protocol for NATS (v0.3,
// verb-first subjects) as a caller sees it: the request envelope sagad
// sends, the chunks an agent streams back, the error frames and the
// terminator, the heartbeats and the discovery answers. Every byte an agent
// sends is untrusted; it becomes a typed value only through the decoders of
// this package, each held by a fuzz target.
//
// The protocol is Synadia's (repository synadia-ai/synadia-agents); this
// package is written from its public description, not from an SDK.
package agentproto
