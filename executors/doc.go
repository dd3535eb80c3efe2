// Package executors defines how sagad calls the agents that do the work: an
// [Executor] produces an artifact for a capsule, a [Reviewer] judges it. The
// daemon orchestrates; executors and reviewers are pluggable and selected by
// task.kind and review.reviewer_agent_id through a [Registry].
//
// The built-in stubs ([Stub], [StubReviewer]) are deterministic and scripted
// from the capsule's metadata.stub object, so every path of the saga can be
// driven from the command line:
//
//	"metadata": {"stub": {
//	    "reviews": ["CHANGES_REQUESTED", "APPROVED"], // one per cycle; default APPROVED
//	    "rounds":  [["REJECTED"], []],                 // a verification loop's round r (chain.round) uses rounds[r-1] as its reviews
//	    "usage":   {"tokens": 1200, "dollars": 0.02},  // reported per executor call
//	    "review_usage": {"tokens": 10, "dollars": 0},  // reported per review call
//	    "fail":    "model refused"                     // the executor fails (true or a message)
//	}}
//
// Real workers are reached through adapters configured by [Config]: a NATS
// micro-service ([NATSExecutor], [NATSReviewer]) or a local program
// ([Command]). Both speak the wire contract below, which is what a worker in
// any language implements.
//
// # Wire contract: requests
//
// An executor call is the JSON object [ExecuteCall]:
//
//	{"kind": "execute",
//	 "capsule": {...the capsule exactly as published...},
//	 "cycle": 1,
//	 "idempotency_key": "<capsule_id>/<cycle>",
//	 "trace_id": "...",
//	 "findings": [{"rule": 0, "field": "...", "message": "..."}],
//	 "prior_artifact_ref": "artifact:<capsule_id>/<cycle-1>",
//	 "prior_artifact": {"ref": "...", "media_type": "...", "size": 123, "sha256": "...", "content": ...},
//	 "operator_answer": {"text": "...", "by": "...", "at": "<RFC 3339>"},
//	 "completion_token": "<64 hex digits>",
//	 "call_token": "<64 hex digits>",
//	 "context_artifacts": [{...capsule.Artifact, content when small...}]}
//
// context_artifacts are the artifacts the capsule's artifact: context refs
// name, in order (left out when there are none): a chain step's is the
// previous step's final artifact, artifact:<capsule_id>/final resolving to
// the artifact of that capsule's last approved cycle. findings are the previous review's findings when the cycle is a revision
// (an empty array on the first cycle) — after an operator's revise, the
// reviewer's findings of that cycle, then the rationale with "source":
// "operator" — and prior_artifact_ref names the artifact they are about
// (left out on a first cycle; a command gets it as SAGA_PRIOR_ARTIFACT_REF).
// prior_artifact is that artifact ([ArtifactBody]); its content, like a
// context artifact's, is sent only when at most [Request.InlineBytes]
// (default 256 KiB) and the request fits the server's max payload
// ([ExecuteCall.Shrink]); without it the worker fetches the artifact by ref
// on saga.artifacts.get with the call's completion_token (package
// artifactsvc). operator_answer is the latest answer a person gave
// (sagactl resume --answer, a revise's rationale; SAGA_OPERATOR_ANSWER for
// a command), left out when none. completion_token is a secret sagad
// makes for this call alone (32 random bytes, hex): a worker that answers
// "accepted" must put it in its completion (below), and must not show it
// to anyone else. call_token is the secret of the claim the call is made
// under (the same for its attempts): a worker that delegates publishes a
// child capsule naming this one in parent_capsule_id, with the header
// Saga-Parent-Token: <call_token>. A reviewer call is [ReviewCall]: the
// same without findings and completion_token, with "kind": "review",
// "artifact": {...capsule.Artifact, content included...} and "call_token",
// the call's secret for saga.artifacts.get (the artifact's content is left
// out only when the request would not fit one NATS message).
//
// Over NATS the request also carries the headers [HeaderCapsuleID],
// [HeaderCycle], [HeaderIdempotencyKey] and [HeaderTraceID]; a command gets
// them as the environment variables SAGA_CAPSULE_ID, SAGA_CYCLE,
// SAGA_IDEMPOTENCY_KEY and SAGA_TRACE_ID (and SAGA_CALL = execute|review),
// and an executor call's completion token as SAGA_COMPLETION_TOKEN and its
// call token as SAGA_CALL_TOKEN. Neither token travels in a NATS header: headers are what tracing and
// monitoring tools show.
//
// Every request also carries the W3C Trace Context of the call's span: the
// header [HeaderTraceparent] ("traceparent", lower case,
// "00-<trace id>-<span id>-<flags>") over NATS, the environment variable
// TRACEPARENT for a command. A worker with an OpenTelemetry SDK extracts it
// (propagation.TraceContext) and starts its own spans as its children, so
// its work shows in the capsule's trace; one without can ignore it. It is
// sent whether or not sagad exports spans itself (docs/OBSERVABILITY.md "Tracing
// (OpenTelemetry)").
//
// # Delivery: calls are at least once, under one idempotency key
//
// What sagad records is exactly once: per (capsule, cycle) one execution
// result, one artifact, one review entry, each call's usage charged once, each
// transition once. The calls themselves are at least once. sagad calls an
// agent for a (capsule, cycle) only under that cycle's claim (a lease in the
// checkpoint that the running call renews), and not again once its result is
// recorded or its artifact stored; but a call whose result was not stored yet
// is made again, with the same idempotency key "<capsule_id>/<cycle>", when
// the sagad making it dies or shuts down (the redelivered message takes the
// lapsed claim over), when storing the result keeps failing until the phase's
// time runs out (until then a live sagad keeps the result and its claim and
// retries the write),
// when a NATS attempt times out or finds no responders and is retried
// (Endpoint.Retries), when that sagad is cut off from NATS for longer than the
// lease (another one takes over while the first call may still run; the first
// result is then discarded), and when an operator resumes a capsule parked on
// a reviewer's "accepted" or on human input, or forces the resume of one
// waiting for accepted work.
//
// A worker de-duplicates by call kind and key (a cycle's executor and
// reviewer calls carry the same key): it stores each final answer (status ok
// or failed, with its usage, and the completion of accepted work) under the
// key as it replies, answers a repeated key with the stored answer without
// doing the work again (re-delivering the completion), and makes a repeat that
// arrives while the first call still runs wait for it. The answers belong
// where all the worker's instances find them and a restart keeps them (a KV
// bucket keyed by kind and key, with a time to live longer than sagad may
// retry: the capsule's deadline or sagad's retention). examples/worker keeps
// them in memory, a demo's compromise. A worker that does not de-duplicate
// does the work twice now and then; sagad records one of the answers.
//
// Each delivery of an executor call carries a new completion token, and sagad
// then awaits only the latest: a completion must carry the token of the
// latest call the worker was given for the idempotency key (publish the
// completion again with it if the first went out with an older one).
//
// # Wire contract: replies
//
// An executor answers [ExecutorReply]:
//
//	{"status": "ok", "content": <any JSON>, "media_type": "application/json",
//	 "usage": {"tokens": 1200, "dollars": 0.02}}
//
// and a reviewer [ReviewerReply]:
//
//	{"status": "ok", "verdict": "APPROVED"|"CHANGES_REQUESTED"|"REJECTED",
//	 "findings": [{"message": "..."}], "usage": {"tokens": 10, "dollars": 0}}
//
// status is "ok" (the default when omitted), "failed" (with "error": "why";
// the capsule halts with executor_failed:<error>, unless "retryable": true
// asks for a retry, see the failure policy below) or "accepted": the work
// goes on asynchronously and the worker publishes a [Completion] later on
// CompletionSubject(capsule_id, cycle), i.e. "saga.complete.<capsule_id>.<cycle>".
// A completion is the same JSON as the synchronous reply with status "ok" or
// "failed", plus "kind": "execute" and the call's "completion_token":
//
//	{"kind": "execute", "status": "ok", "content": {...}, "usage": {...},
//	 "completion_token": "<the call's token>"}
//
// Anyone allowed to publish on saga.complete.> could send a completion, so
// sagad takes only one carrying the token of the call the capsule awaits
// (it keeps only the token's SHA-256 in the checkpoint, so whoever reads
// checkpoints cannot forge one). Every other message on the subject is
// dropped and counted in sagad_messages_terminated_total{cause}, and never
// completes nor halts the capsule: completion_malformed (not a valid
// completion: not JSON, an unknown status, "ok" without content, invalid
// usage), completion_unauthenticated (no token, or not the awaited call's)
// and completion_not_awaited (a cycle the capsule does not await, or no
// longer: recorded already, or the capsule moved on). A worker's own
// failure is status "failed" with the right token, which halts the capsule
// with executor_failed:<error>. A capsule that accepted work under a sagad
// from before completion tokens has no token to match: it ends at its
// completion timeout, unless an operator's "sagactl resume --force" asks
// the executor again (with a token).
//
// Only executors work asynchronously: reviewers answer synchronously; a
// reviewer's "accepted" parks the capsule (blocked_external) until an
// operator resumes it, which asks the reviewer again, and a completion with
// "kind": "review" is dropped and counted
// (sagad_messages_terminated_total{cause="review_completion"}). Usage is
// reported with every answer, failures included: it feeds the capsule's
// budget.
//
// Publish a completion with a JetStream publish (sagad keeps completions in
// the SAGA_COMPLETIONS stream) and retry until it is acknowledged: a plain
// NATS publish made while sagad's server restarts is lost, and the capsule
// then waits for it until its external timeout. examples/worker does this.
//
// A NATS micro-service error (the Nats-Service-Error headers) counts as
// "failed" with the service's code and description.
//
// # Failure policy
//
// [Policy.Decide] maps a failed executor or reviewer call to an [Action]: a
// command's exit 1, exit 21 or timeout is retried up to the endpoint's
// failure_retries (default 1); exit 12 and a NATS reply with "retryable":
// true up to self_heal (default 2); exit 11 pauses the capsule for a person
// (blocked_external); anything else halts executor_failed (a reviewer's:
// executor_failed:reviewer: …). A retry is attempt n of the cycle's step,
// with idempotency key "<capsule_id>/<cycle>/a<n>" and "previous_failure"
// ([PreviousFailure]) in its [ExecuteCall] or [ReviewCall]. A reviewer's
// exit 10 is its CHANGES_REQUESTED verdict, not a failure. Completions of
// accepted work do not follow the policy.
package executors
