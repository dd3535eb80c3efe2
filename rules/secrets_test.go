package rules

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSecretKind is Rule 9's text patterns, one string at a time: every
// positive names its kind, every negative is text a capsule may well hold.
func TestSecretKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, s, want string // want "" means no finding
	}{
		// AWS secret access keys, the forms of credentials files, env and YAML.
		{"aws credentials file", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "an AWS secret access key"},
		{"aws env upper case", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "an AWS secret access key"},
		{"aws yaml colon", "aws_secret_access_key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "an AWS secret access key"},
		{"aws json in text", `{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}`, "an AWS secret access key"},
		{"aws secret key short name", "aws-secret-key: wJalrXUtnFEMI/K7MDENG", "an AWS secret access key"},
		{"secret key assignment", "SECRET_KEY = 'django-insecure-abc'", "a password=/secret=/token=/api_key=/secret_key= assignment"},
		{"camel case secret key", "secretKey=abc123", "a password=/secret=/token=/api_key=/secret_key= assignment"},
		{"access key assignment", "access_key=AKIDEXAMPLE", "a password=/secret=/token=/api_key=/secret_key= assignment"},
		{"private key assignment", "private_key=\"abc\"", "a password=/secret=/token=/api_key=/secret_key= assignment"},
		{"quoted password", `password="hunter2"`, "a password=/secret=/token=/api_key=/secret_key= assignment"},
		{"client secret", "client_secret=abc", "a password=/secret=/token=/api_key=/secret_key= assignment"},
		// Passwords in database and broker URLs.
		{"postgres", "postgres://user:pass@db.internal:5432/app", "a password in a URL"},
		{"postgresql with params", "postgresql://app:s3cr3t@10.0.0.1/app?sslmode=require", "a password in a URL"},
		{"mysql", "connect to mysql://root:toor@localhost/mysql", "a password in a URL"},
		{"mongodb srv", "mongodb+srv://admin:Pa55word@cluster0.example.net/test", "a password in a URL"},
		{"redis password only", "redis://:hunter2@cache:6379/0", "a password in a URL"},
		{"amqp", "AMQP_URL=amqp://guest:guest@rabbit:5672/", "a password in a URL"},
		{"https basic auth", "https://bob:letmein@example.com/x", "a password in a URL"},
		{"upper-case scheme", "POSTGRES://U:P@H/D", "a password in a URL"},

		// Negatives: no credential in any of these.
		{"postgres without user", "postgres://host/db", ""},
		{"postgres host and port", "postgres://db.internal:5432/app", ""},
		{"user without password", "postgres://user@host/db", ""},
		{"user at host", "user@host", ""},
		{"ssh url with user", "ssh://git@github.com:22/org/repo", ""},
		{"scp form", "git@github.com:org/repo.git", ""},
		{"port then at in query", "http://example.com:8080/path?x=1@y", ""},
		{"empty url password", "postgresql://user:@host/db", ""},
		{"placeholder password", "postgres://user:${DB_PASSWORD}@host/db", ""},
		{"documented placeholder", "postgres://user:<password>@host/db", ""},
		{"password policy", "password_policy=strict", ""},
		{"token budget", "token_budget=500", ""},
		{"secret santa", "secret_santa=true", ""},
		{"blank password", `password=""`, ""},
		{"prose about secrets", "rotate the AWS secret access key monthly", ""},
		{"aws key name alone", "set aws_secret_access_key in the vault", ""},
		{"aws key placeholder", "aws_secret_access_key = <your key>", ""},
		{"env placeholder", "TOKEN=${TOKEN}", ""},
		{"plain url", "https://example.com/docs?page=2", ""},
		{"bearer word", "the bearer of this letter", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, secretKind(tt.s), "%q", tt.s)
		})
	}
}

// TestCredentialNames covers the JSON form {"aws_secret_access_key": "…"}.
func TestCredentialNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"aws_secret_access_key": true, "AWS-Secret-Key": true, "accessKey": true, "private_key": true,
		"password": true, "db_passwd": true, "next_token": true,
		"password_policy": false, "key": false, "primary_key": false, "access_key_id": false, "host": false,
	} {
		require.Equal(t, want, isCredentialName(name), name)
	}
}
