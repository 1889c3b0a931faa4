package sqlite

import (
	"bytes"
	"database/sql/driver"
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"modernc.org/sqlite"

	"github.com/relaykit/relay/cloud/store"
)

// A body is stored in delivery_bodies' body column in the form its codec
// column names: as received (codecRaw), or S2-compressed (codecS2). JSON
// webhooks shrink about four times (the benchmark's mix of GitHub and
// Stripe payloads: 144 KB to 34 KB), which is most of a stored delivery on
// this engine, its WAL and its backups; Postgres compresses bodies itself
// (lz4, migration 4 of its own). What comes back out is byte for byte what
// went in: every reader unpacks.
const (
	codecRaw int64 = 0
	codecS2  int64 = 1
)

// packMin is the smallest body worth compressing: below it the saving is
// a few bytes of a row that already holds more in its other columns.
const packMin = 512

// packBuffers hold the compressor's output, which needs room for more than
// the body, for bodies up to a MiB; what is kept is a copy of the size
// the output came to (a quarter of a JSON body), not that room.
var packBuffers = sync.Pool{New: func() any { return new([]byte) }}

const pooledPackMax = 1 << 20

// pack returns body in the form to store and its codec: compressed when
// that saves at least an eighth, else as it is.
func pack(body []byte) (data []byte, codec int64) {
	if len(body) < packMin {
		return body, codecRaw
	}
	var out []byte // nil: s2 allocates room of its own
	if len(body) <= pooledPackMax {
		buf := packBuffers.Get().(*[]byte)
		defer packBuffers.Put(buf)
		if n := s2.MaxEncodedLen(len(body)); cap(*buf) < n {
			*buf = make([]byte, n)
		}
		out = (*buf)[:cap(*buf)]
	}
	c := s2.Encode(out, body)
	if len(c) > len(body)-len(body)/8 {
		return body, codecRaw
	}
	if out != nil {
		c = bytes.Clone(c) // the pooled room goes back
	}
	return c, codecS2
}

// unpack returns the body data holds in codec's form.
func unpack(data []byte, codec int64) ([]byte, error) {
	switch codec {
	case codecRaw:
		return data, nil
	case codecS2:
		b, err := s2.Decode(nil, data)
		if err != nil {
			return nil, fmt.Errorf("stored body: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("stored body: unknown codec %d", codec)
}

// PackBodies packs each insert's body before the insert joins a shared
// transaction (the group commit calls it in each caller's goroutine), so
// that compressing is spread over the callers rather than done by the one
// writer with the transaction open. An insert it did not see is packed
// in DeliveryInsertBatch.
func (s *Store) PackBodies(ps []*store.DeliveryInsertParams) {
	var last *store.DeliveryInsertParams
	for _, p := range ps {
		if last != nil && p.Share != nil && p.Share == last.Share {
			p.Packed = last.Packed // a fanout's members share one body
			continue
		}
		data, codec := pack(store.OrEmpty(p.RawBody))
		p.Packed = &store.PackedBody{Data: data, Codec: codec}
		last = p
	}
}

// packedOf is r's body as stored.
func packedOf(r *store.InsertRow) (data []byte, codec int64) {
	if p := r.Packed; p != nil {
		return p.Data, p.Codec
	}
	return pack(r.Body)
}

// relay_body(body, codec) unpacks a stored body in SQL: for the reads of
// one delivery and for migrations, on every connection this driver opens.
// (A SQLite shell, without it, reads the body as stored.)
func init() {
	err := sqlite.RegisterDeterministicScalarFunction("relay_body", 2, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		if args[0] == nil {
			return nil, nil
		}
		data, ok := args[0].([]byte) // a BLOB column of a STRICT table
		codec, isInt := args[1].(int64)
		if !ok || !isInt {
			return nil, fmt.Errorf("relay_body: want a blob and an integer codec, have %T and %T", args[0], args[1])
		}
		b, err := unpack(data, codec)
		if err != nil {
			return nil, err
		}
		if b == nil {
			b = []byte{}
		}
		return b, nil
	})
	if err != nil {
		panic("sqlite: " + err.Error())
	}
}
