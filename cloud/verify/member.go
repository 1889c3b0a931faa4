package verify

import (
	"encoding/json"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// topMember returns the raw value of the top-level member key of a JSON
// object body (the last one, when a key repeats, as decoding into a map
// would), without decoding or copying the rest.
func topMember(b []byte, key string) (json.RawMessage, bool) {
	return jsonwalk.Member(b, key)
}

// topMembers returns every top-level member of a JSON object body, the
// values sharing the body's memory; nil for anything else.
func topMembers(b []byte) fields {
	f := fields{}
	ok := jsonwalk.Members(b, func(name, value []byte) {
		if s, ok := jsonwalk.Name(name); ok {
			f[s] = value
		}
	})
	if !ok {
		return nil
	}
	return f
}
