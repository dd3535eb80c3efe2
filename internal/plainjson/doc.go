// Package plainjson writes the JSON of sagad's small hot records (an
// artifact's object metadata, a lock's lease) without encoding/json's
// reflection, for the values where the bytes are certain to be the ones
// encoding/json writes. A caller asks first (Plain, AppendTime's ok) and
// hands anything else to json.Marshal itself.
package plainjson
