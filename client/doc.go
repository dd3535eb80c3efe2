// Package client is the read and publish side of sagad for sagactl and Go
// producers: publish capsules, read a capsule's status, list, history and
// wait, with read-only rights on JetStream.
package client
