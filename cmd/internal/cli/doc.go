// Package cli is sagactl, the operator's admin CLI. Each command is a small
// cobra command whose work writes to an io.Writer, so tests capture output.
//
// Exit codes (also in `sagactl --help`), after the executor vocabulary of the
// design notes:
//
//	0   success; `wait`: the capsule completed; `check`: no finding
//	1   failure; `wait`: the capsule halted; `check`: findings
//	2   usage error (bad flags or arguments, unreadable input)
//	3   `wait`: the capsule needs a human (paused or waiting_for_operator, not
//	    paused on accepted external work, which wait waits out)
//	4   capsule not found
//	5   refused: the capsule's state does not allow the action (nothing changed)
//	20  `wait`: the capsule was cancelled
//	21  `wait`: timed out with the capsule still in progress
package cli
