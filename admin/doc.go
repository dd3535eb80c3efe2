// Package admin carries out operator actions — pause, resume, cancel, the
// operator gate's decisions, phase pause and resume — as state machine events
// on the checkpoint followed by their effects; sagad's admin service
// (package adminsvc) and its maintenance services call it.
package admin
