#!/usr/bin/env node
// sagad's demo worker in Node.js: one executor (task kind "demo") and one
// independent reviewer ("demo-reviewer"), served as a NATS micro-service on
// the subjects examples/sagad.json points sagad at. It speaks the same wire
// contract as the Go worker of examples/worker (whose README is the
// contract's reference): a request per call, a JSON reply, an "accepted"
// reply and a completion on saga.complete.<capsule_id>.<cycle> carrying the
// call's completion_token for long work (--async), and the first answer
// again for a repeated idempotency key.
//
//   npm ci && node worker.mjs [--nats-url URL] [--agent-id ID] [--async] [--serve execute|review|both]
//
// Connection settings, as sagad's and sagactl's: --nats-url or SAGA_NATS_URL
// (several separated by commas), SAGA_NATS_USER with SAGA_NATS_PASSWORD or
// SAGA_NATS_PASSWORD_FILE, SAGA_NATS_NKEY (a seed file), SAGA_NATS_CREDS, or
// SAGA_NATS_TOKEN. With none, each endpoint logs in with its own seed, as
// sagad's embedded server wants (each executor and reviewer is a NATS
// account of its own): SAGA_EXECUTOR_NKEY or ./data/creds/executor-demo.nk
// for "execute", SAGA_REVIEWER_NKEY or ./data/creds/reviewer-demo-reviewer.nk
// for "review" (run from sagad's directory). Each endpoint served has a
// connection of its own.
import { connect, credsAuthenticator, nkeyAuthenticator } from "nats";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const SERVICE = "sagad-demo-worker-node";
const EXECUTE_SUBJECT = "agents.demo.execute";
const REVIEW_SUBJECT = "agents.demo.review";
const REVIEWER_ID = "demo-reviewer";
const MAX_REMEMBERED = 10000;

const { values: flags } = parseArgs({
  options: {
    "nats-url": { type: "string" },
    "agent-id": { type: "string", default: "demo-worker-node" },
    async: { type: "boolean", default: false },
    serve: { type: "string", default: "both" },
  },
});

// The default seed of each endpoint's credentials.
const SEEDS = {
  execute: { env: "SAGA_EXECUTOR_NKEY", file: "data/creds/executor-demo.nk" },
  review: { env: "SAGA_REVIEWER_NKEY", file: "data/creds/reviewer-demo-reviewer.nk" },
};

// connectOptions reads the settings sagad, sagactl and the Go worker share,
// for the endpoint ep.
function connectOptions(env, ep) {
  const secret = (file) => readFileSync(file, "utf8").replace(/[\r\n]+$/, "");
  const opts = {
    servers: (flags["nats-url"] || env.SAGA_NATS_URL || "nats://127.0.0.1:4222").split(","),
    name: `${SERVICE}-${ep}`,
    maxReconnectAttempts: -1,
  };
  if (env.SAGA_NATS_CREDS) {
    opts.authenticator = credsAuthenticator(readFileSync(env.SAGA_NATS_CREDS));
  } else if (env.SAGA_NATS_USER) {
    opts.user = env.SAGA_NATS_USER;
    opts.pass = env.SAGA_NATS_PASSWORD_FILE ? secret(env.SAGA_NATS_PASSWORD_FILE) : env.SAGA_NATS_PASSWORD;
  } else if (env.SAGA_NATS_TOKEN || env.SAGA_NATS_TOKEN_FILE) {
    opts.token = env.SAGA_NATS_TOKEN_FILE ? secret(env.SAGA_NATS_TOKEN_FILE) : env.SAGA_NATS_TOKEN;
  } else {
    const own = env[SEEDS[ep].env] || (existsSync(SEEDS[ep].file) ? SEEDS[ep].file : "");
    const seed = env.SAGA_NATS_NKEY || own;
    if (seed) opts.authenticator = nkeyAuthenticator(new TextEncoder().encode(secret(seed)));
  }
  return opts;
}

// fetchArtifact reads an artifact's content by ref from sagad's
// saga.artifacts.get, page by page, with the current call's token (an
// executor's completion_token, a reviewer's call_token): sagad hands a
// call's worker exactly the artifacts that call names. It checks the size
// and sha256 and returns the content's bytes.
async function fetchArtifact(nc, ref, token) {
  const chunks = [];
  let offset = 0;
  for (;;) {
    const msg = await nc.request("saga.artifacts.get", JSON.stringify({ ref, token, offset }), { timeout: 10_000 });
    if (msg.headers?.get("Nats-Service-Error-Code")) {
      throw new Error(`saga.artifacts.get refused (${msg.headers.get("Nats-Service-Error-Code")}): ${msg.headers.get("Nats-Service-Error")}`);
    }
    const page = msg.json();
    const data = Buffer.from(page.data ?? "", "base64");
    chunks.push(data);
    offset += data.length;
    if (page.eof) {
      const all = Buffer.concat(chunks);
      const sum = createHash("sha256").update(all).digest("hex");
      if (all.length !== page.size || sum !== page.sha256) throw new Error(`${ref}: size or sha256 does not match`);
      return all;
    }
    if (data.length === 0) throw new Error(`${ref}: empty page before the end`);
  }
}

// padding is metadata {"worker": {"pad_bytes": N}}: the demo makes its
// artifact that long, to show a prior artifact too large to travel inline.
const padding = (c) => "p".repeat(Math.min(Math.max(c.metadata?.worker?.pad_bytes ?? 0, 0), 8 << 20));

// execute produces the artifact: the task restated, its acceptance
// criteria, the findings it answers (the reviewer's, then an operator's
// revise, source "operator"), the operator's answer, and which prior
// artifact a revision read — inline, or by reference when it was larger
// than sagad's --inline-artifact-bytes.
async function execute(call, nc) {
  const c = call.capsule;
  const artifact = {
    summary: `${c.task.title}: ${c.task.description}`,
    title: c.task.title,
    target: c.target,
    acceptance_criteria: c.spec?.acceptance_criteria ?? [],
    addressed_findings: (call.findings ?? []).map((f) => (f.source ? `${f.source}: ${f.message}` : f.message)),
    cycle: call.cycle,
    produced_by: flags["agent-id"],
  };
  if (call.operator_answer) artifact.operator_answer = call.operator_answer.text;
  const prior = call.prior_artifact;
  if (prior) {
    let via = "inline";
    if (prior.content === undefined) {
      via = "reference";
      JSON.parse((await fetchArtifact(nc, prior.ref, call.completion_token)).toString("utf8"));
    }
    artifact.revised = { ref: prior.ref, size: prior.size, sha256: prior.sha256, via };
  }
  const pad = padding(c);
  if (pad) artifact.padding = pad;
  // A stand-in for a model's bill: a token per character of the task.
  const tokens = c.task.title.length + c.task.description.length;
  return { status: "ok", content: artifact, media_type: "application/json", usage: { tokens, dollars: tokens * 0.000002 } };
}

// review approves an artifact that covers every acceptance criterion, asks
// for changes otherwise, and refuses its own producer's work (Rule 15).
async function review(call, nc) {
  const c = call.capsule;
  let content = call.artifact?.content;
  if (content === undefined && call.artifact?.size > 0 && call.call_token) {
    // Too large for the request: fetched by ref with the call's token.
    content = JSON.parse((await fetchArtifact(nc, call.artifact.ref, call.call_token)).toString("utf8"));
  }
  const tokens = Math.floor(JSON.stringify(content ?? null).length / 4) + 1;
  const reply = (verdict, findings = []) => ({ status: "ok", verdict, findings, usage: { tokens, dollars: tokens * 0.000002 } });
  if (c.producer_agent_id === REVIEWER_ID || call.artifact?.producer_agent_id === REVIEWER_ID) {
    return reply("REJECTED", [{ rule: 15, field: "review.reviewer_agent_id", message: `${REVIEWER_ID} produced this artifact and cannot review it` }]);
  }
  if (call.cycle === 1 && c.metadata?.worker?.changes_first) {
    return reply("CHANGES_REQUESTED", [{ field: "artifact.content", message: "demo: name the licence (metadata.worker.changes_first)" }]);
  }
  if (content == null || typeof content !== "object" || Object.keys(content).length === 0) {
    return reply("CHANGES_REQUESTED", [{ field: "artifact.content", message: "the artifact is empty" }]);
  }
  const covered = new Set(content.acceptance_criteria ?? []);
  const missing = (c.spec?.acceptance_criteria ?? []).filter((want) => !covered.has(want));
  if (missing.length > 0) {
    return reply("CHANGES_REQUESTED", missing.map((want) => ({
      field: "artifact.content.acceptance_criteria", message: `acceptance criterion "${want}" is not addressed`,
    })));
  }
  return reply("APPROVED");
}

// seen holds each first answer by call kind and idempotency key: a repeated
// call (a retry, a restarted sagad) gets it again, without the work being
// done twice. In memory, a demo's compromise: a real worker keeps it where
// every instance finds it and a restart does not lose it (README "Delivery
// guarantees").
const seen = new Map();

// deliver publishes a completion to JetStream over nc, retrying until the
// server acknowledges it (a plain publish while the server restarts would
// be lost).
async function deliver(nc, subject, completion) {
  const js = nc.jetstream();
  const body = JSON.stringify(completion);
  for (let wait = 250, until = Date.now() + 10 * 60_000; Date.now() < until; wait = Math.min(2 * wait, 5000)) {
    try {
      await js.publish(subject, body, { timeout: 5000 });
      return;
    } catch (err) {
      if (nc.isClosed()) return;
      if (err.code === "503") { // no stream stores completions: whoever listens gets it
        nc.publish(subject, body);
        return;
      }
      console.error(`publish completion ${subject}, will retry: ${err.message}`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
  console.error(`completion ${subject} not delivered`);
}

// handle answers one call: the stored answer for a repeated key, else a new
// one; in --async mode an executor's result goes out as a completion.
function handle(nc, kind, work) {
  return async (err, msg) => {
    if (err) {
      console.error(`${kind}: ${err.message}`);
      return;
    }
    let call;
    try {
      call = msg.json();
    } catch (e) {
      msg.respond(JSON.stringify({ status: "failed", error: `bad request: ${e.message}`, usage: { tokens: 0, dollars: 0 } }));
      return;
    }
    const key = `${kind} ${call.idempotency_key ?? msg.headers?.get("Saga-Idempotency-Key") ?? ""}`;
    let answer = seen.get(key);
    const repeat = answer !== undefined;
    if (!repeat) {
      let result;
      try {
        result = await work(call, nc);
      } catch (e) {
        result = { status: "failed", error: `bad call: ${e.message}`, usage: { tokens: 0, dollars: 0 } };
      }
      answer = { reply: result };
      if (flags.async && kind === "execute" && result.status === "ok") {
        answer = { reply: { status: "accepted", usage: { tokens: 0, dollars: 0 } }, completion: { kind, ...result } };
      }
      if (seen.size >= MAX_REMEMBERED) seen.clear();
      seen.set(key, answer);
    }
    msg.respond(JSON.stringify(answer.reply));
    if (answer.completion) {
      // A repeated call carries a new token, and sagad awaits only that one.
      const completion = { ...answer.completion, completion_token: call.completion_token };
      deliver(nc, `saga.complete.${call.capsule.capsule_id}.${call.cycle}`, completion);
    }
    console.log(JSON.stringify({ msg: "answered", call: kind, capsule_id: call.capsule?.capsule_id, cycle: call.cycle, trace_id: call.trace_id, repeat, async: !!answer.completion }));
  };
}

const serve = flags.serve === "both" ? ["execute", "review"] : [flags.serve];
if (!serve.every((ep) => ep in SEEDS)) {
  console.error(`--serve ${flags.serve}: want execute, review or both`);
  process.exit(2);
}
const ENDPOINTS = {
  execute: { subject: EXECUTE_SUBJECT, work: execute },
  review: { subject: REVIEW_SUBJECT, work: review },
};
const running = [];
for (const ep of serve) {
  const nc = await connect(connectOptions(process.env, ep));
  const srv = await nc.services.add({
    name: SERVICE,
    version: "1.0.0",
    description: "sagad demo executor and reviewer, in Node.js",
    metadata: { agent_id: flags["agent-id"], reviewer_id: REVIEWER_ID },
  });
  srv.addEndpoint(ep, { subject: ENDPOINTS[ep].subject, handler: handle(nc, ep, ENDPOINTS[ep].work) });
  await nc.flush();
  running.push({ nc, srv });
  console.log(JSON.stringify({ msg: "serving", service: SERVICE, endpoint: ep, id: srv.info().id, server: nc.getServer() }));
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, async () => {
    for (const { nc, srv } of running) {
      await srv.stop();
      await nc.drain();
    }
    process.exit(0);
  });
}
