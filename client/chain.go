package client

import (
	"github.com/sagad/sagad/capsule"
)

// ChainStep is one step of a chain as `sagactl chain` shows it.
type ChainStep struct {
	Step       int           `json:"step"`
	CapsuleID  string        `json:"capsule_id"`
	Kind       string        `json:"kind"`
	State      capsule.State `json:"state"`
	Phase      int           `json:"phase"`
	PhaseName  string        `json:"phase_name"`
	HaltReason string        `json:"halt_reason,omitempty"`
	WaitingFor []string      `json:"waiting_for,omitempty"`
}

// Chain is a chain's steps in order.
type Chain struct {
	ChainID string `json:"chain_id"`
	// Producer is the producer whose chain it is (chain ids are per
	// producer); absent for a chain sagad's own account composed.
	Producer string      `json:"producer,omitempty"`
	Steps    []ChainStep `json:"steps"`
}
