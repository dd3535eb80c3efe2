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
//	    "usage":   {"tokens": 1200, "dollars": 0.02},  // reported per executor call
//	    "review_usage": {"tokens": 10, "dollars": 0},  // reported per review call
//	    "fail":    "model refused"                     // the executor fails (true or a message)
//	}}
package executors
