// Package compose assigns compositions: a producer sends a chain document
// (schemas/chain.schema.json) to sagad's service on saga.compose, and sagad,
// not the producer, makes its steps' capsules. Each step gets a random
// capsule id nobody can guess or claim first; the assignment is recorded
// once per producer, composition id and run in SAGA_CHAINS ([Record]: its
// types and codec are this package's, store.Compositions keeps its bytes,
// keys and revisions), and sagad
// publishes the steps itself on the producer's intake subject
// (saga.intake.<producer>), so they are the producer's capsules, under its
// quota. RECEPTION refuses any capsule declaring
// a chain step the record does not name (chain_membership_refused).
//
// A chain document is one kind of composition (schemas/composition.schema.json):
// a graph of named steps, each needing others and reading their final
// artifacts. [Check] judges a document whole before anything starts (the
// graph, then every step's capsule by every rule that needs no runtime
// fact); one finding refuses it, nothing recorded or published.
//
// The same document sent again by the same producer gets the same ids and
// starts nothing new (the steps are published again with the same bytes,
// which RECEPTION ignores as duplicates); an edited document under an id
// the producer already used is a new run, with new steps. Ids are per
// producer: two producers' chains of one id are two chains.
//
// The [Runner] keeps each run's record from its steps' ends (capsule
// outcomes), emits the composition events and the run's one outcome on
// saga.outcome.composition.<id>; [Cancel], [Pause] and [Resume] act on a
// run's unfinished steps.
//
// A verification loop (loops[] of a document) runs its steps and verifier
// as round 1; when the verifier does not pass, the Runner records round 2
// under fresh capsule ids (the record first, then the publish, then the
// publish recorded, so a crash publishes the same bytes again), built from
// the document kept beside the record with the verifier's findings in
// chain.findings. The steps after a loop are held, unpublished, until it
// passes; two rounds in a row without fewer findings pause the run for a
// person ([Decide] on the verifier). See loops.go and rounds.go.
//
// Subjects: a producer account imports saga.compose.<producer> as its
// saga.compose, so the subject's last token names the producer; sagad's own
// account may call plain saga.compose (producer "").
package compose
