// Package natsconn is how sagad and sagactl connect to NATS: one set of
// connection settings ([Options]) with the same flag and environment names on
// both binaries, turned into nats.go options, and [Redact], which keeps
// credentials out of every log line and error message.
//
// The settings, each a flag and an environment variable:
//
//	--nats-url            SAGA_NATS_URL            server URL(s), comma-separated
//	--nats-creds          SAGA_NATS_CREDS          credentials file (JWT and NKey seed)
//	--nats-nkey           SAGA_NATS_NKEY           NKey seed file
//	--nats-user           SAGA_NATS_USER           user name
//	--nats-password-file  SAGA_NATS_PASSWORD_FILE  file holding the password
//	(no flag)             SAGA_NATS_PASSWORD       the password itself
//	--nats-token-file     SAGA_NATS_TOKEN_FILE     file holding the token
//	(no flag)             SAGA_NATS_TOKEN          the token itself
//	--tls-ca              SAGA_TLS_CA              CA certificate(s) that sign the server's
//	--tls-cert            SAGA_TLS_CERT            client certificate (mutual TLS)
//	--tls-key             SAGA_TLS_KEY             client certificate's key
//
// Passwords and tokens have no flag of their own: a flag's value shows in the
// process list and in shell history.
package natsconn
