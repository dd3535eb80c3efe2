// Package compose assigns compositions: a producer sends a chain document
// (schemas/chain.schema.json) to sagad's service on saga.compose, and sagad,
// not the producer, makes its steps' capsules. Each step gets a random
// capsule id nobody can guess or claim first; the assignment is recorded
// once per producer and chain id in SAGA_CHAINS (store.Chains), and sagad
// publishes the steps itself on the producer's intake subject
// (saga.intake.<producer>), so they are the producer's capsules, under its
// quota. RECEPTION refuses any capsule declaring
// a chain step the record does not name (chain_membership_refused).
//
// The same document sent again by the same producer gets the same ids and
// starts nothing new (the steps are published again with the same bytes,
// which RECEPTION ignores as duplicates); another document under a chain id
// the producer already used is refused. Chain ids are per producer: two
// producers' chains of one id are two chains.
//
// Subjects: a producer account imports saga.compose.<producer> as its
// saga.compose, so the subject's last token names the producer; sagad's own
// account may call plain saga.compose (producer "").
package compose
