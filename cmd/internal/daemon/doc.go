// Package daemon is sagad's process: flags, environment and config file,
// the embedded nats-server (the default) or a connection to an external NATS
// system, the pipeline, the HTTP listener for health and metrics, and graceful
// shutdown. cmd/sagad only calls [Main].
package daemon
