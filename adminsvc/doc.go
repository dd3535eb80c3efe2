// Package adminsvc serves sagad's admin API (pause, resume, cancel, decide,
// phase pause/resume/list, pending) as the NATS micro service "sagad-admin"
// on saga.admin.<verb>, and its [Client] calls it; docs/ADMIN.md documents
// the subjects, the request and reply JSON and the error codes.
package adminsvc
