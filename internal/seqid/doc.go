// Package seqid makes unique ids shaped like nuid's (22 base-62 characters:
// a random 12-character prefix, then a 10-character sequence) from a
// generator of the caller's own with an atomic counter. nuid.Next shares
// one generator behind one lock in the whole process, which every phase
// worker took at every attempt (the run token) and every artifact put (the
// object's id): a contended lock on sagad's hottest path.
package seqid
