package store

import "encoding/json"

// Rules every engine applies the same way. Engines differ only in SQL.

// OrDefault is p, or DefaultRetryPolicy when p has no delays.
func (p RetryPolicy) OrDefault() RetryPolicy {
	if len(p.Delays) == 0 {
		return DefaultRetryPolicy
	}
	return p
}

// FailureReason is the audit reason of a failed attempt that transition tr
// moved to status to.
func FailureReason(tr Transition, to Status, retryable bool) string {
	switch {
	case to != StatusDLQ:
		return tr.Reason
	case !retryable:
		return tr.Reason + ": not retryable, dead-lettered"
	default:
		return tr.Reason + ": attempts exhausted, dead-lettered"
	}
}

// LeaseCut returns how many lease candidates (body sizes, in FIFO order) fit
// in one batch of at most max deliveries and maxBytes of body (0: no byte
// bound). A single delivery larger than maxBytes goes alone.
func LeaseCut(sizes []int, max, maxBytes int) int {
	n, total := 0, 0
	for _, size := range sizes {
		if n >= max || (n > 0 && maxBytes > 0 && total+size > maxBytes) {
			break
		}
		total += size
		n++
	}
	return n
}

// NacksByID indexes nacks by delivery id (the last nack of an id wins) and
// lists the distinct ids in their first order.
func NacksByID(nacks []Nack) (ids []string, byID map[string]Nack) {
	byID = make(map[string]Nack, len(nacks))
	ids = make([]string, 0, len(nacks))
	for _, nk := range nacks {
		if _, dup := byID[nk.ID]; !dup {
			ids = append(ids, nk.ID)
		}
		byID[nk.ID] = nk
	}
	return ids, byID
}

// JSONFields encodes a source's list and map fields as stored, nil as empty.
func (p *SourceUpsertParams) JSONFields() (events, secrets, options []byte, err error) {
	ev, sec, opt := p.Events, p.Secrets, p.Options
	if ev == nil {
		ev = []string{}
	}
	if sec == nil {
		sec = []SealedSecret{}
	}
	if opt == nil {
		opt = map[string]string{}
	}
	if events, err = json.Marshal(ev); err != nil {
		return nil, nil, nil, err
	}
	if secrets, err = json.Marshal(sec); err != nil {
		return nil, nil, nil, err
	}
	if options, err = json.Marshal(opt); err != nil {
		return nil, nil, nil, err
	}
	return events, secrets, options, nil
}
