// Package client is the publish side of sagad for sagactl and Go
// producers (publish capsules), and, through package status, the JetStream
// reads of a capsule's status, list, history and wait that sagad serves
// operators on its admin service (admin, adminsvc): sagactl itself reads
// nothing from JetStream.
package client
